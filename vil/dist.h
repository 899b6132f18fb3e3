/* dist.h: the process group of a data-parallel run: one process per GPU (or per CPU run),
 * started by mpirun or Slurm's srun, which say how many there are and which one this is. MPI
 * (Open MPI) carries the host-side collectives (loss and accuracy sums, the stop decision, the
 * NCCL id); gradients go through the backend's allreduce op (MPI on the CPU, NCCL on CUDA). A
 * build without MPI runs one process and says how to get more. */
#ifndef VIL_DIST_H
#define VIL_DIST_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct VilDist {
    int rank, world;             /* this process and how many take part */
    int local_rank, local_world; /* on this host: local_rank picks the GPU */
    int mpi;                     /* 1: MPI is initialized (launched by mpirun / srun), so the
                                  * collectives run even with one process */
    const char *launcher;        /* "mpirun", "srun", or "none" */
} VilDist;

/* Joins the group the launcher started: MPI_Init when the environment shows mpirun (Open MPI,
 * MPICH / PMI) or srun (Slurm, PMIx); a single process otherwise. A process started by a
 * launcher in a build without MPI is an error (N copies training alone would be silent
 * waste). 0, or -1 with a vil_error message. */
int vil_dist_init(VilDist *d);
/* A single process, no MPI (tests, tools). */
void vil_dist_single(VilDist *d);
void vil_dist_finalize(VilDist *d);
/* The number of processes a launcher (mpirun, srun) started, from the environment alone; 0
 * when none did. For commands that run one process: they refuse several. */
int vil_dist_launched(void);
/* 1 when this vil was built with MPI */
int vil_dist_built_with_mpi(void);
/* "MPI yes (Open MPI 4.1.6)", or "MPI no (...how to get it)" */
const char *vil_dist_build_info(void);

/* Host-side collectives over the group; with d NULL or no MPI they return at once. Every rank
 * must make the same calls in the same order. */
void vil_dist_sum_double(const VilDist *d, double *v, int n);
void vil_dist_sum_float(const VilDist *d, float *v, size_t n);
/* 1 when flag is nonzero on any rank: decisions that every rank must take together */
int vil_dist_any(const VilDist *d, int flag);
void vil_dist_bcast(const VilDist *d, void *buf, size_t bytes, int root);
void vil_dist_barrier(const VilDist *d);
/* Ends every process of the group (a failure on one rank that the others would wait on). */
void vil_dist_abort(const VilDist *d, int code);

/* The watchdog: with several processes vil_dist_init starts a thread that ends the group when a
 * wait on the other ranks (every collective above, the gradient all-reduce, NCCL's join) lasts
 * longer than the timeout, or when NCCL reports an error: it prints "rank R: no progress from
 * the other ranks for T s in <what> during <phase> (step S); exiting (the limit: ...)" and calls
 * MPI_Abort, so the launcher stops every process. A dead or hung rank ends the run instead of
 * holding the others forever. The timeout starts as $VIL_DIST_TIMEOUT seconds (default
 * VIL_DIST_TIMEOUT_DEFAULT); vil train then applies its dist_timeout key. The calls below are
 * stores, or do nothing without the thread. */
#define VIL_DIST_TIMEOUT_DEFAULT 600.0
/* seconds; 0: never fire */
void vil_dist_set_timeout(double seconds);
/* What the run is doing, for the message: "training", "validation", "saving" (a static string)
 * and the global step (-1: none). */
void vil_dist_progress(const char *phase, long step);
/* A wait on the other ranks begins / ends; what is a static string ("a broadcast", "joining
 * NCCL"). Not nested. */
void vil_dist_wait_begin(const char *what);
void vil_dist_wait_end(void);
/* Collectives that run on a device, out of the host's sight (the CUDA backend's NCCL
 * all-reduces). The watchdog's thread calls, each round: pending_since, the vil_now() time at
 * which the oldest unfinished one was queued (0: none); error, which writes an error the
 * collective library reported asynchronously and returns 1 (0: none). NULL unregisters; a
 * registration is copied, and a call in progress ends before vil_dist_watch_device returns. */
typedef struct VilDistDeviceWatch {
    double (*pending_since)(void *ctx);
    int (*error)(void *ctx, char *msg, size_t n);
    void *ctx;
} VilDistDeviceWatch;
void vil_dist_watch_device(const VilDistDeviceWatch *w);

#ifdef __cplusplus
}
#endif
#endif
