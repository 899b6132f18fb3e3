/* dist.c: the process group of dist.h over MPI (Open MPI from Debian's libopenmpi-dev; any MPI
 * with MPI_Comm_split_type) and its watchdog thread. Without VIL_MPI every call is a single
 * process's. */
#include "vil/dist.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vil/common.h"
#include "vil/ops_cpu.h"

#ifdef VIL_MPI
#include <mpi.h>
#define ACTIVE(d) ((d) && (d)->mpi)
/* the CPU backend's async all-reduces not yet waited for (one process group per process) */
static MPI_Request *g_pending;
static int g_npending, g_cap;
#endif

/* ---- the watchdog (dist.h): one per process, as the process group is ---- */

/* The main thread stores, the watchdog's thread loads (__atomic, relaxed: a round that reads a
 * wait half-begun sees it at the next). Times in microseconds of vil_now(). */
static struct {
    int running;               /* the thread exists (written by the main thread only) */
    int rank;
    long long timeout_us;      /* 0: never fire */
    long long since_us;        /* when the open wait began; 0: none open */
    const char *what, *phase;
    long step;
    pthread_t thread;
    pthread_mutex_t mu;        /* guards stop and dev; the thread sleeps on cv */
    pthread_cond_t cv;
    int stop;
    VilDistDeviceWatch dev;
} W = {.mu = PTHREAD_MUTEX_INITIALIZER, .step = -1};

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

static long long now_us(void) { return (long long)(vil_now() * 1e6); }

void vil_dist_set_timeout(double seconds) {
    STORE(W.timeout_us, seconds > 0 ? (long long)(seconds * 1e6) : 0);
}

void vil_dist_progress(const char *phase, long step) {
    STORE(W.phase, phase);
    STORE(W.step, step);
}

void vil_dist_wait_begin(const char *what) {
    if (!W.running) return;
    STORE(W.what, what);
    STORE(W.since_us, now_us());
}

void vil_dist_wait_end(void) {
    if (W.running) STORE(W.since_us, 0);
}

void vil_dist_watch_device(const VilDistDeviceWatch *w) {
    pthread_mutex_lock(&W.mu);
    if (w) W.dev = *w;
    else memset(&W.dev, 0, sizeof W.dev);
    pthread_mutex_unlock(&W.mu);
}

#ifdef VIL_MPI
/* Ends the group from the watchdog's thread. The main thread is inside a collective (or a
 * device wait) that will not return: MPI_Abort makes the launcher stop every process. An
 * MPI_THREAD_FUNNELED process may call MPI from this thread only here, on its way out. SIGALRM
 * (its default action ends the process) bounds an abort that hangs, as an exit behind a stuck
 * GPU kernel may. */
static void watchdog_fire(const char *why, int timed_out) {
    const char *phase = LOAD(W.phase);
    long step = LOAD(W.step);
    char where[96] = "";
    if (step >= 0) snprintf(where, sizeof where, " (step %ld)", step);
    vil_error("rank %d: %s%s%s%s; exiting%s", W.rank, why, phase ? " during " : "", phase ? phase : "",
              where, timed_out ? " (the limit: the training key dist_timeout, or VIL_DIST_TIMEOUT)" : "");
    fflush(NULL);
    alarm(15);
    MPI_Abort(MPI_COMM_WORLD, 1);
    /* not a return path: a rank that hangs in a collective cannot be returned from. The
     * watchdog is armed only by a run of several ranks (vil_dist_set_timeout, dist_timeout) */
    _exit(1);
}

static void *watchdog_main(void *arg) {
    (void)arg;
    /* the waits that this process saw begin before `fresh` are measured from it */
    long long last = now_us(), fresh = 0;
    pthread_mutex_lock(&W.mu);
    while (!W.stop) {
        long long tmo = LOAD(W.timeout_us);
        /* a round a quarter of the timeout, at most a second: it fires within 1.25 x the timeout */
        long long period = tmo > 0 && tmo < 4000000 ? tmo / 4 : 1000000;
        if (period < 10000) period = 10000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(period / 1000000);
        ts.tv_nsec += (long)(period % 1000000) * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&W.cv, &W.mu, &ts);
        tmo = LOAD(W.timeout_us);
        if (W.stop || tmo <= 0) continue;
        char why[512];
        long long since = LOAD(W.since_us), now = now_us();
        const char *what = LOAD(W.what);
        /* a round far later than due: this process was stopped (SIGSTOP, a suspended machine)
         * and the launcher woke it, maybe to end it; the others are not to blame for that time */
        if (now - last > 2 * period + 1000000) fresh = now;
        last = now;
        /* the same wait still open (not one that ended and began again between the loads) */
        if (since && now - (since > fresh ? since : fresh) > tmo && LOAD(W.since_us) == since) {
            snprintf(why, sizeof why, "no progress from the other ranks for %g s in %s",
                     (double)tmo / 1e6, what ? what : "a collective");
            watchdog_fire(why, 1);
        }
        if (W.dev.pending_since) {
            long long t = (long long)(W.dev.pending_since(W.dev.ctx) * 1e6);
            if (t > 0 && now - (t > fresh ? t : fresh) > tmo) {
                snprintf(why, sizeof why, "no progress from the other ranks for %g s in the "
                         "gradient all-reduce on the GPU (NCCL)", (double)tmo / 1e6);
                watchdog_fire(why, 1);
            }
        }
        char err[256];
        if (W.dev.error && W.dev.error(W.dev.ctx, err, sizeof err)) {
            snprintf(why, sizeof why, "the gradient all-reduce failed: %s", err);
            watchdog_fire(why, 0);
        }
    }
    pthread_mutex_unlock(&W.mu);
    return NULL;
}

/* The thread takes no signals: SIGINT / SIGTERM stay the main thread's (the trainer's clean
 * stop), SIGALRM ends the process wherever it is. */
static int watchdog_start(int rank) {
    W.rank = rank;
    W.stop = 0;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&W.cv, &ca);
    pthread_condattr_destroy(&ca);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&W.thread, NULL, watchdog_main, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        vil_error("cannot start the watchdog thread: %s", strerror(rc));
        pthread_cond_destroy(&W.cv);
        return -1;
    }
    W.running = 1;
    return 0;
}

static void watchdog_stop(void) {
    if (!W.running) return;
    pthread_mutex_lock(&W.mu);
    W.stop = 1;
    pthread_cond_signal(&W.cv);
    pthread_mutex_unlock(&W.mu);
    pthread_join(W.thread, NULL);
    pthread_cond_destroy(&W.cv);
    W.running = 0;
    STORE(W.since_us, 0);
}

#endif

/* The launcher, from the variables it sets in each process it starts. */
static const char *launcher_from_env(int *size) {
    static const struct {
        const char *size_var, *name;
    } L[] = {{"OMPI_COMM_WORLD_SIZE", "mpirun"}, {"PMI_SIZE", "mpirun"}, {"PMIX_SIZE", "mpirun"},
             {"SLURM_NTASKS", "srun"}};
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        const char *v = getenv(L[i].size_var);
        /* sbatch sets SLURM_NTASKS for the batch script itself; srun adds SLURM_STEP_ID */
        if (v && strcmp(L[i].name, "srun") == 0 && !getenv("SLURM_STEP_ID")) continue;
        if (v) {
            *size = atoi(v);
            return L[i].name;
        }
    }
    /* Open MPI and PMIx set these even for -np 1 */
    if (getenv("OMPI_COMM_WORLD_RANK") || getenv("PMIX_RANK")) {
        *size = 1;
        return "mpirun";
    }
    *size = 0;
    return NULL;
}

int vil_dist_launched(void) {
    int size = 0;
    return launcher_from_env(&size) ? size : 0;
}

int vil_dist_built_with_mpi(void) {
#ifdef VIL_MPI
    return 1;
#else
    return 0;
#endif
}

#define STR_(x) #x
#define STR(x) STR_(x)
const char *vil_dist_build_info(void) {
#if defined(VIL_MPI) && defined(OMPI_MAJOR_VERSION)
    return "MPI yes (Open MPI " STR(OMPI_MAJOR_VERSION) "." STR(OMPI_MINOR_VERSION) "." STR(OMPI_RELEASE_VERSION) ")";
#elif defined(VIL_MPI)
    return "MPI yes (MPI " STR(MPI_VERSION) "." STR(MPI_SUBVERSION) ")";
#else
    return "MPI no (one process per run: apt-get install libopenmpi-dev openmpi-bin, then rebuild)";
#endif
}

void vil_dist_single(VilDist *d) {
    memset(d, 0, sizeof *d);
    d->world = d->local_world = 1;
    d->launcher = "none";
}

int vil_dist_init(VilDist *d) {
    vil_dist_single(d);
    int size = 0;
    const char *how = launcher_from_env(&size);
    if (!how) return 0;
#ifdef VIL_MPI
    /* the watchdog's first limit, checked before MPI starts */
    const char *env = getenv("VIL_DIST_TIMEOUT");
    double t = VIL_DIST_TIMEOUT_DEFAULT;
    if (env && (vil_parse_float(env, &t) != 0 || t < 0)) {
        vil_error("VIL_DIST_TIMEOUT='%s': expected seconds >= 0 (0: no watchdog)", env);
        return -1;
    }
    vil_dist_set_timeout(t);
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        vil_error("started by %s, but MPI_Init failed: is this the MPI that %s belongs to?", how, how);
        return -1;
    }
    /* a failure is reported by the caller and ends the group, never a hang in MPI */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &d->world);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &d->local_rank);
    MPI_Comm_size(local, &d->local_world);
    MPI_Comm_free(&local);
    d->mpi = 1;
    d->launcher = how;
    if (d->world > 1 && watchdog_start(d->rank) != 0) return -1;
    return 0;
#else
    if (size > 1) {
        vil_error("started by %s as one of %d processes, but this vil was built without MPI: each "
                  "process would train alone. Install libopenmpi-dev (apt-get install "
                  "libopenmpi-dev openmpi-bin) and rebuild, or run one process.", how, size);
        return -1;
    }
    return 0;
#endif
}

void vil_dist_finalize(VilDist *d) {
#ifdef VIL_MPI
    if (d && d->mpi) {
        free(g_pending);
        g_pending = NULL, g_npending = g_cap = 0;
        /* collective in practice: a rank that hangs holds the others here too */
        vil_dist_wait_begin("MPI_Finalize");
        MPI_Finalize();
        vil_dist_wait_end();
        watchdog_stop();
        d->mpi = 0;
    }
#endif
    (void)d;
}

/* the sum in pieces: MPI counts are int */
static void sum_float(const VilDist *d, float *v, size_t n) {
#ifdef VIL_MPI
    for (size_t o = 0; ACTIVE(d) && o < n;) {
        int c = n - o > (size_t)1 << 30 ? 1 << 30 : (int)(n - o);
        MPI_Allreduce(MPI_IN_PLACE, v + o, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        o += (size_t)c;
    }
#endif
    (void)d, (void)v, (void)n;
}

/* the CPU backend's ops (backend.h): host memory, summed by MPI */
void grad_allreduce(const VilAllReduce *a) {
#ifdef VIL_MPI
    if (a->async && ACTIVE(a->dist)) {
        for (size_t o = 0; o < a->n;) {
            int c = a->n - o > (size_t)1 << 30 ? 1 << 30 : (int)(a->n - o);
            if (g_npending == g_cap) {
                g_cap = g_cap ? 2 * g_cap : 64;
                g_pending = vil_realloc(g_pending, (size_t)g_cap * sizeof *g_pending);
            }
            MPI_Iallreduce(MPI_IN_PLACE, a->buf + o, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &g_pending[g_npending++]);
            o += (size_t)c;
        }
        /* Open MPI moves a nonblocking collective on only inside MPI calls: each new bucket
         * moves the earlier ones on */
        int done;
        MPI_Testall(g_npending, g_pending, &done, MPI_STATUSES_IGNORE);
        return;
    }
#endif
    vil_dist_wait_begin("the gradient all-reduce");
    sum_float(a->dist, a->buf, a->n);
    vil_dist_wait_end();
}

void grad_allreduce_wait(const VilAllReduceWait *a) {
#ifdef VIL_MPI
    if (g_npending) {
        vil_dist_wait_begin("the gradient all-reduce");
        MPI_Waitall(g_npending, g_pending, MPI_STATUSES_IGNORE);
        vil_dist_wait_end();
    }
    g_npending = 0;
#endif
    (void)a;
}

void vil_dist_sum_double(const VilDist *d, double *v, int n) {
#ifdef VIL_MPI
    if (ACTIVE(d) && n > 0) {
        vil_dist_wait_begin("a sum over the ranks");
        MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        vil_dist_wait_end();
    }
#endif
    (void)d, (void)v, (void)n;
}

void vil_dist_sum_float(const VilDist *d, float *v, size_t n) {
    vil_dist_wait_begin("a sum over the ranks");
    sum_float(d, v, n);
    vil_dist_wait_end();
}

int vil_dist_any(const VilDist *d, int flag) {
    int v = flag != 0;
#ifdef VIL_MPI
    if (ACTIVE(d)) {
        vil_dist_wait_begin("a decision of all ranks");
        MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        vil_dist_wait_end();
    }
#endif
    (void)d;
    return v;
}

void vil_dist_bcast(const VilDist *d, void *buf, size_t bytes, int root) {
#ifdef VIL_MPI
    if (ACTIVE(d)) {
        vil_dist_wait_begin("a broadcast");
        MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
        vil_dist_wait_end();
    }
#endif
    (void)d, (void)buf, (void)bytes, (void)root;
}

void vil_dist_barrier(const VilDist *d) {
#ifdef VIL_MPI
    if (ACTIVE(d)) {
        vil_dist_wait_begin("a barrier");
        MPI_Barrier(MPI_COMM_WORLD);
        vil_dist_wait_end();
    }
#endif
    (void)d;
}

void vil_dist_abort(const VilDist *d, int code) {
#ifdef VIL_MPI
    if (ACTIVE(d) && d->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)d, (void)code;
}
