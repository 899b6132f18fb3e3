/* bench_data.h: `vil bench-data`, the throughput of the input pipeline (decode, the recipe's
 * full train transform, mixup) on a dataset, per second and per worker thread. */
#ifndef VIL_BENCH_DATA_H
#define VIL_BENCH_DATA_H

/* argv[0] = "bench-data". Returns 0, 1 (runtime failure) or 2 (bad usage). */
int vil_cmd_bench_data(int argc, char **argv);

#endif
