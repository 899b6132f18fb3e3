/* test_backend_load.c: choosing a device and the CUDA module (vil/backend_load.c). "auto" on a
 * machine without a GPU (or with CUDA_VISIBLE_DEVICES hiding them) runs on the CPU without
 * loading the module and without a word, whatever VIL_BACKEND_PATH names; "--device cuda" that
 * cannot run fails (exit 1) with the reason: no CUDA in this build, the module file not there
 * (named), dlopen's text, a library that is not a module, no driver; `vil --version` loads
 * nothing. In a CUDA build: the core links no CUDA library and the module exports its entry
 * point alone and needs nothing from libvil (nm; skipped without nm). Runs bin/vil. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "vil/backend.h"
#include "vil/backend_module.h"
#include "vil/common.h"

static char *dir;

/* 1 when this process maps the CUDA module or a CUDA library */
static int maps_cuda(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[4096];
    int found = 0;
    while (f && !found && fgets(line, sizeof line, f))
        found = strstr(line, VIL_CUDA_MODULE_FILE) || strstr(line, "libcudart") ||
                strstr(line, "libcudnn") || strstr(line, "libcublas") || strstr(line, "libnccl");
    if (f) fclose(f);
    return found;
}

/* `env bin/vil args` with stdout and stderr in out: its exit status */
static int vil(const char *env, const char *args, char *out, size_t n) {
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "%s bin/vil %s 2>&1", env, args);
    return t_run(cmd, out, n);
}

/* In this process: "cpu" and "auto" without a driver leave the module unloaded; the queries
 * that `vil version` makes do not load it either. */
static void test_in_process(void) {
    T_CHECK(vil_device_name_ok("cpu") && vil_device_name_ok("cuda") && vil_device_name_ok("auto") &&
                !vil_device_name_ok("gpu") && !vil_device_name_ok(""),
            "the device names: cpu, cuda, auto");
    T_CHECK(vil_backend_get("cpu") == &vil_backend_cpu, "cpu is the CPU backend");
    T_CHECK(!maps_cuda(), "the test binary maps no CUDA library at its start");
    VilErrCapture cap;
    vil_error_capture(&cap);
    T_CHECK(vil_backend_get("gpu") == NULL && strstr(cap.msg, "unknown device 'gpu'"),
            "an unknown device is named: %s", cap.msg);
    vil_error_release(&cap);
    char info[1024];
    vil_cuda_module_info(info, sizeof info);
    printf("cuda: %s; module %s; driver %s\n", vil_cuda_build_info(), info,
           vil_gpu_driver_present() ? "present" : "absent");
    T_CHECK(!vil_cuda_module_loaded() && !maps_cuda(), "vil_cuda_module_info loads nothing");
    if (vil_gpu_driver_present()) {
        printf("skipped: auto in this process (this machine shows an NVIDIA driver: the "
               "CUDA_VISIBLE_DEVICES= runs of bin/vil below cover it)\n");
        return;
    }
    vil_error_capture(&cap);
    const VilBackend *be = vil_backend_get("auto");
    vil_error_release(&cap);
    T_CHECK(be == &vil_backend_cpu && cap.count == 0, "auto without a driver: the CPU, no error (%s)", cap.msg);
    vil_error_capture(&cap);
    be = vil_backend_open("auto", 3); /* a rank's own device under mpirun */
    vil_error_release(&cap);
    T_CHECK(be == &vil_backend_cpu && cap.count == 0, "open(auto, 3) without a driver: the CPU, no error (%s)", cap.msg);
    vil_backend_close(be);
    T_CHECK(!vil_cuda_module_loaded() && !maps_cuda(),
            "auto without a driver loads no module (libvil-cuda.so, libcudart not in /proc/self/maps)");
}

/* A tiny checkpoint and an image, for the commands that run on a device. */
static void make_inputs(void) {
    VilModel m;
    t_tiny_model(&m);
    T_CHECK(t_save_bare(&m, t_path(dir, "m.safetensors")) == 0, "tiny checkpoint");
    vil_model_free(&m);
    corpus_write_png(t_path(dir, "x.png"), 20, 18, 1, 0);
    corpus_write(t_path(dir, "notalib.so"), "not an ELF file\n", 16);
    corpus_mkdir("%s/%s", dir, "empty");
}

/* --device auto with VIL_BACKEND_PATH naming a file that is no library: the CPU, and neither an
 * error nor a warning, and (LD_DEBUG) no CUDA library opened */
static void test_auto(void) {
    char env[8192], args[4096], out[65536];
    snprintf(args, sizeof args, "classify --model %1$s/m.safetensors --device auto %1$s/x.png", dir);
    const char *hide[] = {"CUDA_VISIBLE_DEVICES=", NULL};
    for (int k = 0; k < 2; k++) {
        if (!hide[k] && vil_gpu_driver_present()) {
            printf("skipped: auto in this machine's own environment (an NVIDIA driver is here)\n");
            continue;
        }
        snprintf(env, sizeof env, "%s VIL_BACKEND_PATH=%s/notalib.so", hide[k] ? hide[k] : "", dir);
        int rc = vil(env, args, out, sizeof out);
        T_CHECK(rc == 0 && strstr(out, "running on cpu") && !strstr(out, "error") && !strstr(out, "warning"),
                "%s: auto runs on the CPU without a word: exit %d: %.400s", env, rc, out);
        snprintf(env, sizeof env, "LD_DEBUG=files %s VIL_BACKEND_PATH=%s/notalib.so", hide[k] ? hide[k] : "", dir);
        rc = vil(env, args, out, sizeof out);
        T_CHECK(rc == 0 && strstr(out, "file=") && !strstr(out, "notalib") && !strstr(out, "libcudart") &&
                    !strstr(out, VIL_CUDA_MODULE_FILE),
                "%s: auto opens no module and no CUDA library (LD_DEBUG=files): exit %d", env, rc);
    }
}

/* --device cuda that cannot run: exit 1 and the reason */
static void test_cuda_errors(void) {
    char env[8192], args[4096], out[16384];
    /* info opens the device before it reads the checkpoint */
    snprintf(args, sizeof args, "info --model %s/m.safetensors --device cuda", dir);
#ifdef VIL_CUDA
    const char *no_cuda = "CUDA_VISIBLE_DEVICES hides every GPU";
#else
    const char *no_cuda = "this vil was built without CUDA";
#endif
    int rc = vil("CUDA_VISIBLE_DEVICES=", args, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "vil: error: --device cuda: ") &&
                (strstr(out, no_cuda) || strstr(out, "cannot load the CUDA module")),
            "--device cuda without a visible GPU: exit %d (want 1), says '%s': %.600s", rc, no_cuda, out);
#ifdef VIL_CUDA
    if (!vil_gpu_driver_present()) {
        rc = vil("", args, out, sizeof out);
        T_CHECK(rc == 1 && (strstr(out, "no NVIDIA driver on this machine") || strstr(out, "cannot load the CUDA module")),
                "--device cuda without a driver: exit %d, names the driver: %.600s", rc, out);
    }
#endif
    /* VIL_BACKEND_PATH: a file that is not there, a folder without the module, not a library,
     * a library that is no module (the C library: it is there on every machine) */
    Dl_info libc;
    const char *libc_path = dladdr((void *)&printf, &libc) && libc.dli_fname ? libc.dli_fname : "/nonexistent";
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/missing/" VIL_CUDA_MODULE_FILE, dir);
    const struct {
        const char *path, *names, *says;
    } cs[] = {
        {missing, missing, "the CUDA module is not there"},
        {t_path(dir, "empty"), t_path(dir, "empty/" VIL_CUDA_MODULE_FILE), "the CUDA module is not there"},
        {t_path(dir, "notalib.so"), t_path(dir, "notalib.so"), "cannot load the CUDA module: "},
        {libc_path, libc_path, "is not a vil backend module (it has no " VIL_BACKEND_MODULE_ENTRY ")"},
    };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        snprintf(env, sizeof env, "VIL_BACKEND_PATH=%s", cs[k].path);
        rc = vil(env, args, out, sizeof out);
        T_CHECK(rc == 1 && strstr(out, "vil: error: --device cuda: ") && strstr(out, cs[k].says) &&
                    strstr(out, cs[k].names),
                "%s --device cuda: exit %d (want 1), names '%s' and says '%s': %.600s", env, rc,
                cs[k].names, cs[k].says, out);
    }
    /* dlopen's own words for a file that is no ELF object */
    snprintf(env, sizeof env, "VIL_BACKEND_PATH=%s/notalib.so", dir);
    vil(env, args, out, sizeof out);
    T_CHECK(strstr(out, "invalid ELF header") || strstr(out, "file too short"),
            "dlopen's reason is in the message: %.400s", out);
}

/* vil --version names the module without loading it */
static void test_version(void) {
    char out[16384];
    int rc = vil("LD_DEBUG=files", "--version", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "file=") && !strstr(out, VIL_CUDA_MODULE_FILE " [") &&
                !strstr(out, "libcudart") && !strstr(out, "libcudnn"),
            "vil --version opens no CUDA library (LD_DEBUG=files): exit %d", rc);
#ifdef VIL_CUDA
    rc = vil("", "--version", out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "\nCUDA:     ") && strstr(out, "; module ") &&
                (strstr(out, ", not loaded") || strstr(out, "not found")),
            "vil --version in a CUDA build: the build's CUDA facts and the module, not loaded: %s", out);
#endif
}

/* A CUDA build's binaries link no CUDA library; its module exports one symbol and needs no
 * symbol of libvil. */
static void test_module_symbols(void) {
#ifndef VIL_CUDA
    printf("skipped: the CUDA module's symbols (a build without CUDA makes no module)\n");
#else
    char out[65536], cmd[8192];
    if (t_run("command -v nm >/dev/null && command -v readelf >/dev/null", NULL, 0) != 0) {
        printf("skipped: the CUDA module's symbols (no nm or readelf on this machine)\n");
        return;
    }
    const char *build = getenv("VIL_BUILD");
    char mod[4096];
    snprintf(mod, sizeof mod, "%s/lib/" VIL_CUDA_MODULE_FILE, build && *build ? build : "build");
    struct stat st;
    T_CHECK(stat(mod, &st) == 0, "the CUDA build made its module %s", mod);
    if (stat(mod, &st) != 0) return;
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s | awk '{print $NF}'", mod);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strcmp(out, VIL_BACKEND_MODULE_ENTRY "\n") == 0,
            "%s exports " VIL_BACKEND_MODULE_ENTRY " alone; it exports:\n%.2000s", mod, out);
    snprintf(cmd, sizeof cmd, "nm -D --undefined-only %s | awk '{print $NF}' | grep -E '^(vil_|VIL)' ", mod);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(out[0] == '\0', "%s needs nothing of libvil; it asks for:\n%.2000s", mod, out);
    snprintf(cmd, sizeof cmd, "readelf -d %s | grep NEEDED", mod);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && strstr(out, "libcudart") && strstr(out, "libcublasLt") && strstr(out, "libcudnn"),
            "the module links the CUDA libraries: %.2000s", out);
    /* the core: bin/vil, and this test (libvil.a) */
    snprintf(cmd, sizeof cmd, "readelf -d bin/vil /proc/%d/exe | grep NEEDED", (int)getpid());
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && !strstr(out, "libcud") && !strstr(out, "libcublas") && !strstr(out, "libnccl"),
            "bin/vil and the tests link no CUDA library: %.2000s", out);
#endif
}

int main(void) {
    dir = corpus_mkdtemp("backend_load");
    test_in_process();
    make_inputs();
    test_auto();
    test_cuda_errors();
    test_version();
    test_module_symbols();
    corpus_rmtree(dir);
    free(dir);
    return t_finish();
}
