/* args.h: table-driven flag parsing for the `vil` subcommands. Every subcommand describes its
 * flags as a VilArg table; --help prints them; an unknown flag or a bad value prints the usage
 * to stderr with a "did you mean" hint. */
#ifndef VIL_ARGS_H
#define VIL_ARGS_H

typedef enum { VIL_ARG_INT, VIL_ARG_FLOAT, VIL_ARG_STR, VIL_ARG_FLAG, VIL_ARG_LIST } VilArgType;

/* VIL_ARG_LIST: a flag that may repeat (--set key=value --set ...) */
#define VIL_ARG_LIST_MAX 64
typedef struct {
    const char *v[VIL_ARG_LIST_MAX];
    int n;
} VilArgList;

typedef struct {
    const char *name;  /* "--batch" */
    VilArgType type;
    void *dst;         /* int*, float*, const char**, int* (flag set to 1), VilArgList* */
    const char *help;  /* one line */
} VilArg;

typedef struct {
    const char *cmd;      /* "classify" */
    const char *synopsis; /* "--model CKPT [options] IMAGE..." */
    const char *summary;  /* one paragraph, printed by --help */
    const VilArg *args;
    int nargs;
    int min_positional, max_positional; /* max -1: unlimited */
} VilArgSpec;

enum { VIL_ARGS_OK = 0, VIL_ARGS_HELP = 1, VIL_ARGS_USAGE = 2 };

/* Parse argv[1..argc) (argv[0] is the command name). Positional arguments are gathered into
 * *pos (a malloc'd array the caller frees) in order. Returns VIL_ARGS_OK; VIL_ARGS_HELP after
 * printing help to stdout (the caller exits 0); VIL_ARGS_USAGE after printing the error and
 * usage to stderr (the caller exits 2). `--` ends the flags. */
/* The dataset split first (a wrong path is the likeliest mistake and costs nothing to find),
 * then the device: 0, or the exit code 1 with the reason reported and nothing left open. */
struct VilDataset;
struct VilBackend;
int vil_cli_open_data_device(const char *data, const char *split, const char *labels,
                             const char *device, struct VilDataset **ds,
                             const struct VilBackend **be);

int vil_args_parse(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos);
void vil_args_usage(const VilArgSpec *spec, int to_stderr);
/* For a command without positional arguments: parses the flags and returns -1 to go on, or the
 * command's exit code (0 after --help, 2 after a usage error). */
int vil_args_parse_flags(const VilArgSpec *spec, int argc, char **argv);

#endif
