/* commands.h: the `vil` subcommands. Each takes argv[0] = its own name and returns the process
 * exit code: 0 success, 1 runtime failure (with a message saying what to do), 2 bad usage. */
#ifndef VIL_COMMANDS_H
#define VIL_COMMANDS_H

/* one file each in cli/: cli/info.c, cli/classify.c, cli/bench.c, ... */
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

#endif
