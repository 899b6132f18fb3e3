/* commands.h: the `vil` subcommands. Each takes argv[0] = its own name and returns the process
 * exit code: 0 success, 1 runtime failure (with a message saying what to do), 2 bad usage. */
#ifndef VIL_COMMANDS_H
#define VIL_COMMANDS_H

#include "cli/args.h"

/* one file each in cli/: cli/info.c, cli/classify.c, cli/bench.c, ...; beside each its flag
 * table (VilArgSpec), which cli/vil.c reads for the rule of mpirun / srun */
int vil_cmd_info(int argc, char **argv);
int vil_cmd_classify(int argc, char **argv);
int vil_cmd_bench(int argc, char **argv);
int vil_cmd_bench_data(int argc, char **argv);
int vil_cmd_train(int argc, char **argv);
int vil_cmd_eval(int argc, char **argv);
int vil_cmd_convert(int argc, char **argv);
int vil_cmd_compare(int argc, char **argv);
int vil_cmd_plot(int argc, char **argv);
int vil_cmd_states(int argc, char **argv);
int vil_cmd_avg(int argc, char **argv);
extern const VilArgSpec vil_cmd_info_spec, vil_cmd_classify_spec, vil_cmd_bench_spec, vil_cmd_bench_data_spec,
    vil_cmd_train_spec, vil_cmd_eval_spec, vil_cmd_convert_spec, vil_cmd_compare_spec, vil_cmd_plot_spec,
    vil_cmd_states_spec, vil_cmd_avg_spec;

#endif
