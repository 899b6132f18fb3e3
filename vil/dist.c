/* dist.c: the process group of dist.h over MPI (Open MPI from Debian's libopenmpi-dev; any MPI
 * with MPI_Comm_split_type). Without VIL_MPI every call is a single process's. */
#include "vil/dist.h"

#include <stdlib.h>
#include <string.h>

#include "vil/common.h"
#include "vil/ops_cpu.h"

#ifdef VIL_MPI
#include <mpi.h>
#define ACTIVE(d) ((d) && (d)->mpi)
/* the CPU backend's async all-reduces not yet waited for (one process group per process) */
static MPI_Request *g_pending;
static int g_npending, g_cap;
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
        MPI_Finalize();
        d->mpi = 0;
    }
#endif
    (void)d;
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
    vil_dist_sum_float(a->dist, a->buf, a->n);
}

void grad_allreduce_wait(const VilAllReduceWait *a) {
#ifdef VIL_MPI
    if (g_npending) MPI_Waitall(g_npending, g_pending, MPI_STATUSES_IGNORE);
    g_npending = 0;
#endif
    (void)a;
}

void vil_dist_sum_double(const VilDist *d, double *v, int n) {
#ifdef VIL_MPI
    if (ACTIVE(d) && n > 0) MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
#endif
    (void)d, (void)v, (void)n;
}

void vil_dist_sum_float(const VilDist *d, float *v, size_t n) {
#ifdef VIL_MPI
    /* MPI counts are int: large buffers go in pieces */
    for (size_t o = 0; ACTIVE(d) && o < n;) {
        int c = n - o > (size_t)1 << 30 ? 1 << 30 : (int)(n - o);
        MPI_Allreduce(MPI_IN_PLACE, v + o, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        o += (size_t)c;
    }
#endif
    (void)d, (void)v, (void)n;
}

int vil_dist_any(const VilDist *d, int flag) {
    int v = flag != 0;
#ifdef VIL_MPI
    if (ACTIVE(d)) MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
#endif
    (void)d;
    return v;
}

void vil_dist_bcast(const VilDist *d, void *buf, size_t bytes, int root) {
#ifdef VIL_MPI
    if (ACTIVE(d)) MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD);
#endif
    (void)d, (void)buf, (void)bytes, (void)root;
}

void vil_dist_barrier(const VilDist *d) {
#ifdef VIL_MPI
    if (ACTIVE(d)) MPI_Barrier(MPI_COMM_WORLD);
#endif
    (void)d;
}

void vil_dist_abort(const VilDist *d, int code) {
#ifdef VIL_MPI
    if (ACTIVE(d) && d->world > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
    (void)d, (void)code;
}
