/* mpi_testing.h: the setting of a test that starts `mpirun -np 2` (test_dist, test_dist_watchdog,
 * test_logs). Header-only, for tests/ alone. */
#ifndef VIL_TESTS_MPI_TESTING_H
#define VIL_TESTS_MPI_TESTING_H

#include <stdio.h>
#include <stdlib.h>

#include "tests/testing.h"
#include "vil/dist.h"

/* The environment the ranks inherit: mpirun as root (CI runs as root), one OpenMP thread a rank
 * (two ranks on two cores), and under make test-asan Open MPI's own leaks suppressed
 * (tests/lsan.supp) by library name, which needs whole stacks through its libraries and its
 * components kept loaded. */
static inline void t_mpi_env(void) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    setenv("OMP_NUM_THREADS", "1", 1);
    const char *asan = getenv("ASAN_OPTIONS");
    if (asan && *asan) {
        char opts[4096];
        snprintf(opts, sizeof opts, "%s:fast_unwind_on_malloc=0", asan);
        setenv("ASAN_OPTIONS", opts, 1);
    }
    setenv("OMPI_MCA_mca_base_component_disable_dlclose", "1", 1);
}

/* 1 when this vil has MPI and mpirun is found; else a failed check naming what to install, 0 */
static inline int t_mpi_ready(void) {
    if (!vil_dist_built_with_mpi()) {
        T_CHECK(0, "this vil was built without MPI (apt-get install libopenmpi-dev openmpi-bin)");
        return 0;
    }
    if (t_run("command -v mpirun >/dev/null", NULL, 0) != 0) {
        T_CHECK(0, "mpirun not found (apt-get install openmpi-bin)");
        return 0;
    }
    return 1;
}

#endif
