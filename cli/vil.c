/* vil.c: the `vil` command-line program: a table of subcommands, one file each in cli/, over
 * the library in vil/, data/, train/, eval/. `vil help`, `vil CMD --help`, `vil --version`;
 * unknown command: usage on stderr, exit 2. */
#include <stdio.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "vil/dist.h"
#include "vil/common.h"
#include "vil/version.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const VilArgSpec *spec; /* its flags; NULL: none (help) */
    const char *help;
} Command;

static int cmd_help(int argc, char **argv);
static int cmd_version(int argc, char **argv);

static const VilArgSpec version_spec = {"version", "(or vil --version)",
                                        "Prints the version, the git commit this vil was built from (\"unknown\"\n"
                                        "outside a git checkout; -dirty: with uncommitted changes) and the build\n"
                                        "options: compiler, CUDA, BLAS, MPI, OpenMP. `vil --version` is the same.",
                                        NULL, 0, 0, 0};

static const Command COMMANDS[] = {
    {"train", vil_cmd_train, &vil_cmd_train_spec, "train a classifier with the recipe of a cfg file (resumable)"},
    {"eval", vil_cmd_eval, &vil_cmd_eval_spec, "top-1 / top-5 of a checkpoint on a dataset split"},
    {"classify", vil_cmd_classify, &vil_cmd_classify_spec, "classify images with a checkpoint (top-k, or --json)"},
    {"info", vil_cmd_info, &vil_cmd_info_spec, "describe a checkpoint: architecture, parameters, image size, classes"},
    {"convert", vil_cmd_convert, &vil_cmd_convert_spec, "a checkpoint (a .pth such as the published ViM files) to vil's .safetensors or .pth"},
    {"compare", vil_cmd_compare, &vil_cmd_compare_spec, "models side by side: accuracy, speed, memory, GFLOPs per resolution"},
    {"plot", vil_cmd_plot, &vil_cmd_plot_spec, "training curves of runs (their metrics.jsonl) as SVG"},
    {"avg", vil_cmd_avg, &vil_cmd_avg_spec, "the element-wise mean of checkpoints of one network (a run's snapshots)"},
    {"states", vil_cmd_states, &vil_cmd_states_spec, "the scan's state norm along the sequence per layer (past the training length?)"},
    {"bench", vil_cmd_bench, &vil_cmd_bench_spec, "training and inference throughput of a model config on cpu or cuda"},
    {"bench-data", vil_cmd_bench_data, &vil_cmd_bench_data_spec, "throughput of the data pipeline (decode + augmentation)"},
    {"version", cmd_version, &version_spec, "the version, git commit and build options"},
    {"help", cmd_help, NULL, "this list, or `vil help CMD` for one command"},
};
#define NCOMMANDS (int)(sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "vil: Vision Longhorn (ViL) and Vision Mamba (ViM) classifiers in C and CUDA\n\n"
               "usage: vil COMMAND [options]   (vil COMMAND --help for its options)\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-12s %s\n", COMMANDS[i].name, COMMANDS[i].help);
    /* the pieces `vil version` prints, so the two always agree */
    fprintf(f, "\n%s\nbuilt with %s\n", vil_version_string(), vil_build_options());
}

static int cmd_version(int argc, char **argv) {
    int rc = vil_args_parse_flags(&version_spec, argc, argv);
    if (rc >= 0) return rc;
    vil_version_print(stdout);
    return 0;
}

static const Command *find(const char *name) {
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(COMMANDS[i].name, name) == 0) return &COMMANDS[i];
    return NULL;
}

static int cmd_help(int argc, char **argv) {
    if (argc >= 2) {
        const Command *c = find(argv[1]);
        if (c && c->fn != cmd_help) {
            char *a[] = {(char *)c->name, "--help", NULL};
            return c->fn(2, a);
        }
        if (!c) {
            fprintf(stderr, "vil: unknown command '%s'\n", argv[1]);
            usage(stderr);
            return 2;
        }
    }
    usage(stdout);
    return 0;
}

/* Started as one of N > 1 processes (mpirun / srun), a command whose flag table does not say
 * it runs as a process group (VilArgSpec's mpirun) is refused: each copy would do all the work.
 * 1 after the message, which names the commands that do run so. */
static int launch_refused(const Command *c) {
    int n = vil_dist_launched();
    if (n <= 1 || (c->spec && c->spec->mpirun)) return 0;
    char group[256] = "";
    int total = 0, k = 0;
    for (int i = 0; i < NCOMMANDS; i++) total += COMMANDS[i].spec && COMMANDS[i].spec->mpirun;
    for (int i = 0; i < NCOMMANDS; i++) {
        if (!COMMANDS[i].spec || !COMMANDS[i].spec->mpirun) continue;
        size_t len = strlen(group);
        snprintf(group + len, sizeof group - len, "%s`vil %s`", k == 0 ? "" : k == total - 1 ? " and " : ", ",
                 COMMANDS[i].name);
        k++;
    }
    fprintf(stderr, "vil %s: started as one of %d processes (mpirun / srun), but only %s run%s as "
                    "several; run vil %s as one process\n", c->name, n, group, total == 1 ? "s" : "", c->name);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) argv[1] = "version";
    const Command *c = find(argv[1]);
    if (!c) {
        fprintf(stderr, "vil: unknown command '%s'\n", argv[1]);
        int best = 1 << 30;
        const char *b = NULL;
        for (int i = 0; i < NCOMMANDS; i++) {
            int d = vil_edit_distance(argv[1], COMMANDS[i].name);
            if (d < best) best = d, b = COMMANDS[i].name;
        }
        if (b && best <= 3) fprintf(stderr, "did you mean '%s'?\n", b);
        usage(stderr);
        return 2;
    }
    if (launch_refused(c)) return 2;
    return c->fn(argc - 1, argv + 1);
}
