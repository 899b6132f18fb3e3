/* backend_cpu.c: the CPU backend: the float32 reference ops of ops_cpu.h behind the VilBackend
 * table (filled by name from VIL_OPS, so a slot cannot be misplaced). The choice of a backend by
 * name, and loading the CUDA module, is backend_load.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "backend.h"
#include "common.h"
#include "ops_cpu.h"

/* NULL after an "out of memory" message: the sizes are the model's and the caller's batch */
static void *cpu_alloc(const VilBackend *be, size_t bytes) { return vil_try_malloc_aligned(bytes); }
static void cpu_free(const VilBackend *be, void *p) { free(p); }
static void cpu_zero(const VilBackend *be, void *p, size_t bytes) { memset(p, 0, bytes); }
static void cpu_copy(const VilBackend *be, void *dst, const void *src, size_t bytes) {
    memcpy(dst, src, bytes);
}
static void cpu_sync(const VilBackend *be) {}
/* The "<field> N kB" line of a /proc file (scanf format fmt) in KiB, or -1. */
static long proc_kib(const char *path, const char *fmt) {
    FILE *f = fopen(path, "r");
    char line[256];
    long kib = -1;
    while (f && kib < 0 && fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &kib) != 1) kib = -1;
    if (f) fclose(f);
    return kib;
}
/* Linux's VmHWM, which writing 5 to clear_refs resets; getrusage's maxrss where /proc is not */
static size_t cpu_peak_bytes(const VilBackend *be) {
    long kib = proc_kib("/proc/self/status", "VmHWM: %ld kB");
    if (kib >= 0) return (size_t)kib * 1024;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}
static size_t cpu_mem_free(const VilBackend *be) {
    long kib = proc_kib("/proc/meminfo", "MemAvailable: %ld kB");
    return kib > 0 ? (size_t)kib * 1024 : 0;
}
static void cpu_peak_reset(const VilBackend *be) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return; /* the peak then runs from the start, as getrusage's does */
    fputs("5", f);
    fclose(f);
}
static void cpu_act_to_host(const VilBackend *be, float *dst, const void *src, size_t n) {
    memcpy(dst, src, n * sizeof(float));
}
static void *cpu_host_alloc(const VilBackend *be, size_t bytes) { return vil_try_malloc_aligned(bytes); }
static void cpu_host_free(const VilBackend *be, void *p) { free(p); }
/* the feed's slots live in host memory: an upload is a copy, and there is nothing to wait for */
static void cpu_feed_upload(const VilBackend *be, int slot, void *dst, const void *src,
                            size_t bytes) {
    memcpy(dst, src, bytes);
}
static void cpu_feed_nop(const VilBackend *be, int slot) {}
static void cpu_stream_nop(const VilBackend *be, void *stream) {}
/* /proc/cpuinfo's model name, and how many CPUs this process may use */
static const char *cpu_device_name(const VilBackend *be, char *buf, size_t n) {
    char line[512], model[256] = "CPU";
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "model name : %255[^\n]", model) == 1) break;
    if (f) fclose(f);
    snprintf(buf, n, "%s, %ld CPUs online", model, sysconf(_SC_NPROCESSORS_ONLN));
    return buf;
}
/* grad_allreduce goes through MPI on host memory: nothing to set up */
static int cpu_dist_join(const VilBackend *be, const struct VilDist *d) { return 0; }

/* the table's entries: each op of ops_cpu.h behind the (backend, arguments) signature */
#define VIL_CPU_ENTRY(op, Args, label) \
    static void cpu_##op(const VilBackend *be, const Args *args) { op(args); }
VIL_OPS(VIL_CPU_ENTRY)
#undef VIL_CPU_ENTRY

const VilBackend vil_backend_cpu = {
    .name = "cpu",
    .act_bytes = sizeof(float),
    .work_bytes = 0, /* the ops read the float32 master directly */
    .ctx = NULL,
    .device = 0,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .sync = cpu_sync,
    .peak_bytes = cpu_peak_bytes,
    .peak_reset = cpu_peak_reset,
    .mem_free = cpu_mem_free,
    .act_to_host_f32 = cpu_act_to_host,
    .params_to_work = NULL,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .feed_upload = cpu_feed_upload,
    .feed_acquire = cpu_feed_nop,
    .feed_release = cpu_feed_nop,
    .feed_wait = cpu_feed_nop,
    .device_name = cpu_device_name,
    .dist_join = cpu_dist_join,
    .copy = cpu_copy,
    .stream_wait = cpu_stream_nop,
    .stream_signal = cpu_stream_nop,
#define VIL_CPU_SLOT(op, Args, label) .op = cpu_##op,
    VIL_OPS(VIL_CPU_SLOT)
#undef VIL_CPU_SLOT
};
