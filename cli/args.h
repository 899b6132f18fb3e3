/* args.h: table-driven flag parsing for the `vil` subcommands. Every subcommand describes its
 * flags as a VilArg table; --help prints them; an unknown flag or a bad value is one line on
 * stderr (with a "did you mean" when a flag is close) and where to read the usage. */
#ifndef VIL_ARGS_H
#define VIL_ARGS_H

#include <stdio.h>

#include "formats/checkpoint.h"
#include "train/train_config.h"

typedef enum { VIL_ARG_INT, VIL_ARG_FLOAT, VIL_ARG_STR, VIL_ARG_FLAG, VIL_ARG_LIST } VilArgType;

/* VIL_ARG_LIST: a flag that may repeat (--set key=value --set ...). The list a spec names as
 * its `timm` list holds --set's key=value items and timm's flags' values in command-line order,
 * each of those with its row in `timm` (NULL for a key=value). */
#define VIL_ARG_LIST_MAX 64
struct VilTimmFlag;
typedef struct {
    const char *v[VIL_ARG_LIST_MAX];
    const struct VilTimmFlag *timm[VIL_ARG_LIST_MAX];
    int n;
} VilArgList;

typedef struct {
    const char *name;  /* "--batch" */
    VilArgType type;
    void *dst;         /* int*, float*, const char**, int* (flag set to 1), VilArgList* */
    const char *help;  /* one line */
    double lo, hi;     /* INT / FLOAT: the values the flag takes, checked as it is parsed (lo < hi;
                        * both 0: any int / finite float) */
    const char *meta;  /* the value's placeholder in the help ("NAME", "CKPT"); NULL: by type */
    const char *key;   /* the config key the flag sets (train's --decode: decode), or NULL: with
                        * the spec's --set list and timm's flags, one key set twice is refused */
    /* How the flag stands to the others: the rules vil_args_parse checks once every flag is read
     * (required flags, then excludes, then needs, each in the table's order), each broken one a
     * usage error (exit 2). */
    int required;             /* 1: the command cannot run without it */
    const char *or_flag;      /* required: another flag that stands in for it, named with it in the
                               * message ("--config (or --resume)") */
    const char *unless;       /* required: a flag with which it is not needed (train's --data beside
                               * --print-config) */
    const char *excludes;     /* a flag it may not be given with */
    const char *excludes_but; /* its value with which `excludes` does not hold (train's --resume auto:
                               * a fresh run may start from --init) */
    const char *needs;        /* a flag it means nothing without (--init-ema: --init) */
    const char *message;      /* its excludes or needs rule's message (after "vil CMD: ") in place of
                               * the uniform "A and B exclude each other: give one of them" and "A
                               * goes with B" */
    int alone;                /* 1: the flag is the command's whole work (train's --list-keys): given,
                               * no rule is checked */
} VilArg;

typedef struct {
    const char *cmd;      /* "classify" */
    const char *synopsis; /* "--model CKPT [options] IMAGE..." */
    const char *summary;  /* one paragraph, printed by --help */
    const VilArg *args;
    int nargs;
    int min_positional, max_positional; /* max -1: unlimited */
    /* the command's --set list, which timm's flags (train/train_config.h) go into, or NULL: none
     * taken. A timm flag whose key is one of the command's own flags (--batch) is that flag. */
    VilArgList *timm;
    /* the flag the positional arguments are more values of (compare's --models: the files after
     * it count too), which they satisfy when it is required; NULL: none */
    const char *positional_of;
    /* 1: the command may run as several processes under mpirun / srun (train, bench); cli/vil.c
     * refuses any other command started there before it runs (N copies would each do all the
     * work) */
    int mpirun;
} VilArgSpec;

enum { VIL_ARGS_OK = 0, VIL_ARGS_HELP = 1, VIL_ARGS_USAGE = 2 };

/* Parse argv[1..argc) (argv[0] is the command name). A flag with a value given twice is a
 * usage error (the last one silently won); VIL_ARG_LIST and VIL_ARG_FLAG may repeat. So is a
 * config key set twice on the command line by any two routes (two --set items, a timm flag and
 * --set, a timm flag and the command's own flag of that key: -b 4 --set batch=8), naming both; a
 * cfg file (--config) is the layer under the command line, which overrides it. A key a timm flag
 * only implies (--opt sgd: nesterov = 1) is not set by it: --set nesterov=0 refines it. An empty
 * value of a VIL_ARG_STR or VIL_ARG_LIST flag (a path, a name, key=value) is a usage error.
 * Positional arguments are gathered into *pos (a malloc'd array the caller frees) in order; their
 * count checked, then the table's rules (VilArg's required, excludes, needs), each broken one a
 * message: "vil eval: --model and --data are required", "vil plot: --window goes with --agree".
 * Returns VIL_ARGS_OK; VIL_ARGS_HELP after printing help to stdout (the caller exits 0);
 * VIL_ARGS_USAGE after printing the error and vil_args_usage_hint to stderr (the caller exits
 * 2). `--` ends the flags. */
int vil_args_parse(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos);
/* --device and --split checked: 0, or 2 after a usage message (the caller exits 2) */
int vil_cli_check_device_split(const char *cmd, const char *device, const char *split);
/* "vil CMD: FLAG takes CHOICES (got 'VALUE')" on stderr (the value made printable); returns 2,
 * the exit code of bad input */
int vil_cli_bad_choice(const char *cmd, const char *flag, const char *choices, const char *value);
/* A command's --set list and timm's flags into c and t: timm's flags first (in command-line
 * order), then the --set items, so a key a timm flag implies (--opt sgd: nesterov = 1) is refined
 * by a --set of it wherever it stands (vil_args_parse refused a key given twice, so nothing else
 * depends on the order). timm's --lr comes back in *lr (0: not given) for
 * vil_train_config_set_lr once the global batch is known. 0, or the first error's code
 * (reported). */
int vil_cli_apply_sets(VilConfig *c, VilTrainConfig *t, const VilArgList *sets, double *lr);
/* --progress's word as a VilProgressMode (vil/console.h), or -1 after vil_cli_bad_choice */
int vil_cli_progress_mode(const char *cmd, const char *word);

/* "224,384,512" -> out (at most max values, each in lo..hi); how many, or 0 for a malformed list */
int vil_cli_int_list(const char *s, int *out, int max, int lo, int hi);

/* The dataset split first (a wrong path is the likeliest mistake and costs nothing to find),
 * then the device: 0, or the exit code 1 with the reason reported and nothing left open. */
struct VilDataset;
struct VilBackend;
int vil_cli_open_data_device(const char *data, const char *split, const char *labels,
                             const char *device, struct VilDataset **ds,
                             const struct VilBackend **be);

/* What `vil eval` and `vil states` open, in order: --device, --split, --max-pixels and --threads
 * checked (2 after a usage message), then the dataset split and the device, then the checkpoint
 * at lo's size (1 with the reason reported and nothing left open); 0: all open. */
int vil_cli_open_eval(const char *cmd, const char *model, const char *data, const char *split,
                      const char *labels, const char *device, int max_pixels, int threads,
                      const VilCheckpointOpts *lo, struct VilDataset **ds,
                      const struct VilBackend **be, VilModel *m, VilCheckpointMeta *meta);

/* The OpenMP threads of the CPU compute, one rule for every command's --threads N: N > 0 is
 * taken as it is; 0 takes OMP_NUM_THREADS when the environment sets it (a user who sets it means
 * it), else the CPUs this process may run on (its affinity mask, which taskset and mpirun's
 * binding narrow), divided among the ranks of this host when mpirun left them unbound. The
 * loader's threads are not taken off: on the CPU device they
 * wait for the compute almost all the time, and taking them off made the Fashion-MNIST demo
 * 1.9x slower on 2 cores (1 compute thread: 110-115 img/s; 2: 197-240; data wait 0% in both).
 * Returns the count now in effect, or -1 after a usage message on stderr when N is outside
 * 0..VIL_MAX_THREADS (the caller exits 2). Call it before the first OpenMP region. */
int vil_cli_set_threads(const char *cmd, int requested);
/* "threads: N compute (OpenMP), L loader" and a newline (no loader part when L is 0): the line
 * the commands print for a run on the cpu device */
void vil_cli_print_threads(FILE *f, int loader_threads);
/* the help text of every --threads flag; loader: the threads subtracted, e.g. "--workers" */
/* --data's help: every layout vil_dataset_open takes (doc/formats.md, "Datasets") */
#define VIL_DATA_HELP                                                                              \
    "dataset: ImageNet-style root (train/, val/: class folders or .tar shards), a shard pattern "  \
    "'dir/train-{0000..0146}.tar', an IDX folder or file, or a flat folder (with --labels)"
#define VIL_THREADS_HELP "CPU compute threads (0: $OMP_NUM_THREADS if set, else the CPUs this process may use)"

/* --max-pixels N of the commands that decode images (classify, eval, train, bench-data): the
 * decoded-pixel limit checked on each image's header (vil_image_set_max_pixels). 0, or 2 after
 * a usage message (the caller exits 2). */
int vil_cli_set_max_pixels(const char *cmd, int n);
#define VIL_MAX_PIXELS_HELP "refuse images of more pixels (width x height; read on the header, before decoding)"

/* The usage (--help); each flag's default is its value when vil_args_parse began (the values
 * typed before --help are not defaults). */
void vil_args_usage(const VilArgSpec *spec, int to_stderr);
/* What follows a usage error's message on stderr, instead of the whole usage: "vil CMD --help
 * lists the flags" */
void vil_args_usage_hint(const VilArgSpec *spec);
/* vil_args_parse as a command's opening: -1 to go on with the positional arguments in *pos (the
 * caller frees it) and *npos, or the command's exit code (0 after --help, 2 after a usage
 * error). */
int vil_args_parse_all(const VilArgSpec *spec, int argc, char **argv, char ***pos, int *npos);
/* The same for a command without positional arguments. */
int vil_args_parse_flags(const VilArgSpec *spec, int argc, char **argv);

#endif
