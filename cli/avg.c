/* avg.c: `vil avg CKPT... --out F`: the element-wise mean of checkpoints of one network (a run's
 * step_N snapshots, or the checkpoints of several runs), as timm's avg_checkpoints.py: summed in
 * double, written as float32, with the first file's metadata and the list of the sources
 * ("vil.avg_sources"). A folder stands for its step_*.safetensors. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cJSON.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "formats/checkpoint.h"
#include "formats/pth.h"
#include "formats/safetensors.h"
#include "vil/common.h"

/* a safetensors file, or a PyTorch .pth (ema: its model_ema); 0, or -1 reported */
static int read_weights(const char *path, int ema, VilSafetensors *st, int *is_pth) {
    unsigned char head[4] = {0};
    long got = vil_read_head(path, head, 4); /* a FIFO is refused, not waited on */
    if (got < 0) {
        char shown[1024];
        vil_error("cannot read '%s': not a readable regular file", vil_printable(shown, sizeof shown, path));
        return -1;
    }
    *is_pth = got == 4 && vil_pth_sniff(head, 4) != 0;
    VilPthInfo info;
    if (*is_pth) return vil_pth_read(path, ema, st, &info);
    if (ema) {
        vil_error("'%s' is a safetensors file: vil keeps a run's EMA weights in a file of their own "
                  "(RUN/ema.safetensors); list those files without --ema", path);
        return -1;
    }
    return vil_st_read(path, st);
}

typedef struct {
    long step;
    char *path;
} Snapshot;

static int by_step(const void *a, const void *b) {
    long x = ((const Snapshot *)a)->step, y = ((const Snapshot *)b)->step;
    return (x > y) - (x < y);
}

/* the step_*.safetensors of folder dir, in step order (step_900 before step_1000), appended to
 * *list; their count, or -1 */
static int add_snapshots(const char *dir, char ***list, int *n) {
    DIR *d = opendir(dir);
    if (!d) {
        vil_error("cannot read the folder '%s': %s", dir, strerror(errno));
        return -1;
    }
    Snapshot *snap = NULL;
    size_t k = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        char tail[32];
        if (sscanf(e->d_name, "step_%ld%31s", &step, tail) != 2 || strcmp(tail, ".safetensors") != 0) continue;
        if (k == cap) snap = vil_realloc(snap, (cap = cap ? 2 * cap : 64) * sizeof *snap);
        snap[k].step = step;
        snap[k++].path = vil_path_join(dir, e->d_name);
    }
    closedir(d);
    if (k > 1) qsort(snap, k, sizeof *snap, by_step);
    *list = vil_realloc(*list, ((size_t)*n + k + 1) * sizeof(char *));
    for (size_t i = 0; i < k; i++) (*list)[(*n)++] = snap[i].path;
    free(snap);
    return (int)k;
}

static void shape_str(char *buf, size_t n, const VilStTensor *t) {
    size_t at = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < t->ndim && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
    if (at < n) snprintf(buf + at, n - at, "]");
}

/* b's tensors are a's (names and shapes); else reported, naming the tensor */
static int same_network(const VilSafetensors *a, const char *pa, const VilSafetensors *b, const char *pb) {
    char sa[160], sb[160];
    for (int i = 0; i < a->n_tensors; i++) {
        const VilStTensor *x = &a->tensors[i], *y = vil_st_find(b, x->name);
        if (!y) {
            vil_error("'%s' has no tensor '%s', which '%s' has: not the same network", pb,
                      vil_printable(sa, sizeof sa, x->name), pa);
            return 0;
        }
        int same = x->ndim == y->ndim;
        for (int d = 0; same && d < x->ndim; d++) same = x->shape[d] == y->shape[d];
        if (!same) {
            shape_str(sa, sizeof sa, x), shape_str(sb, sizeof sb, y);
            char nm[160];
            vil_error("tensor '%s' is %s in '%s' but %s in '%s': not the same network",
                      vil_printable(nm, sizeof nm, x->name), sa, pa, sb, pb);
            return 0;
        }
    }
    if (b->n_tensors != a->n_tensors) {
        for (int i = 0; i < b->n_tensors; i++)
            if (!vil_st_find(a, b->tensors[i].name)) {
                vil_error("'%s' has a tensor '%s' that '%s' has not: not the same network", pb,
                          vil_printable(sa, sizeof sa, b->tensors[i].name), pa);
                return 0;
            }
    }
    return 1;
}

/* files[k] as a checkpoint vil loads (its metadata consistent with its tensors), of the same
 * network, classes and image size as the first; 0, or -1 with the input named */
static int check_input(const char *path, int ema, VilConfig *first, int k) {
    VilModel m;
    VilCheckpointMeta meta;
    VilCheckpointOpts o = {.ema = ema};
    char shown[1024];
    vil_printable(shown, sizeof shown, path);
    VilErrCapture cap;
    vil_error_capture(&cap);
    int rc = vil_checkpoint_load(path, &vil_backend_cpu, &o, &m, &meta);
    vil_error_release(&cap);
    if (rc != 0) {
        /* the reader's message names the file, or it is said here */
        if (strstr(cap.msg, shown)) vil_error("%s", cap.msg);
        else vil_error("input '%s' is not a checkpoint vil can use: %s", shown, cap.msg);
        return -1;
    }
    /* what tensors of the same shapes can still differ in (the shapes are compared as the
     * files are summed, naming the tensor) */
    const VilConfig *c = &m.cfg;
    if (k == 0) *first = *c;
    else if (c->rec != first->rec || c->img_size != first->img_size || c->stride != first->stride) {
        vil_error("input '%s' is a %s model at %d px with stride %d, the first input a %s model at "
                  "%d px with stride %d: not the same network; average checkpoints of one network",
                  shown, c->arch, c->img_size, c->stride, first->arch, first->img_size, first->stride);
        rc = -1;
    }
    vil_checkpoint_meta_free(&meta);
    vil_model_free(&m);
    return rc;
}

/* The inputs as named (a folder: its snapshots). 0, or the exit code */
static int gather(char **pos, int npos, char ***files, int *n) {
    for (int i = 0; i < npos; i++) {
        struct stat sb;
        if (stat(pos[i], &sb) == 0 && S_ISDIR(sb.st_mode)) {
            int k = add_snapshots(pos[i], files, n);
            if (k < 0) return 1;
            if (k == 0) {
                char shown[1024];
                vil_error("the folder '%s' holds no step_N.safetensors snapshots (a run saves them "
                          "with save_every_steps): name the checkpoints to average",
                          vil_printable(shown, sizeof shown, pos[i]));
                return 1;
            }
        } else {
            *files = vil_realloc(*files, (size_t)(*n + 1) * sizeof(char *));
            (*files)[(*n)++] = vil_strdup(pos[i]);
        }
    }
    if (*n < 2) {
        fprintf(stderr, "vil avg: averaging needs at least two checkpoints (got %d)\n", *n);
        return 2;
    }
    return 0;
}

/* the mean as a safetensors file with the first input's tensors and metadata and the list of
 * the sources; 0, or -1 reported */
static int write_mean(const char *out, const VilSafetensors *first, int first_pth, const double *sum,
                      size_t total, char **files, int n) {
    float *mean = vil_malloc((total ? total : 1) * sizeof(float));
    for (size_t j = 0; j < total; j++) mean[j] = (float)(sum[j] / n);
    VilStWriter *w = vil_st_writer_new();
    size_t at = 0;
    for (int i = 0; i < first->n_tensors; i++) {
        const VilStTensor *t = &first->tensors[i];
        vil_st_writer_add(w, t->name, VIL_ST_F32, t->ndim, t->shape, mean + at);
        at += (size_t)vil_st_numel(t);
    }
    if (first_pth) vil_st_writer_meta(w, "format", "pt");
    for (int i = 0; i < first->n_meta; i++)
        if (strcmp(first->meta_keys[i], "vil.avg_sources") != 0)
            vil_st_writer_meta(w, first->meta_keys[i], first->meta_vals[i]);
    cJSON *src = cJSON_CreateArray();
    for (int k = 0; k < n; k++) {
        char shown[1024];
        cJSON_AddItemToArray(src, cJSON_CreateString(vil_printable(shown, sizeof shown, files[k])));
    }
    char *s = cJSON_PrintUnformatted(src);
    vil_st_writer_meta(w, "vil.avg_sources", s);
    cJSON_free(s);
    cJSON_Delete(src);
    int rc = vil_st_writer_save(w, out);
    vil_st_writer_free(w);
    free(mean);
    return rc;
}

/* Every input checked (a checkpoint vil loads, which refuses NaN or infinite values, of the first
 * one's network) and then summed in double: nothing is written before all of them passed, and
 * the mean of finite float32 values is finite. 0, or -1 reported */
static int average(const char *out, char **files, int n, int ema) {
    VilConfig net;
    for (int k = 0; k < n; k++)
        if (check_input(files[k], ema, &net, k) != 0) return -1;
    VilSafetensors first;
    int first_pth;
    if (read_weights(files[0], ema, &first, &first_pth) != 0) return -1;
    size_t total = 0;
    for (int i = 0; i < first.n_tensors; i++) total += (size_t)vil_st_numel(&first.tensors[i]);
    double *sum = vil_calloc(total ? total : 1, sizeof(double));
    float *tmp = NULL;
    size_t tmp_n = 0;
    int ok = 1;
    for (int k = 0; k < n && ok; k++) {
        VilSafetensors other, *st = &first;
        int pth;
        if (k > 0) {
            if (read_weights(files[k], ema, &other, &pth) != 0) {
                ok = 0;
                break;
            }
            st = &other;
            ok = same_network(&first, files[0], st, files[k]);
        }
        size_t at = 0;
        for (int i = 0; ok && i < first.n_tensors; i++) {
            const VilStTensor *t = k ? vil_st_find(st, first.tensors[i].name) : &first.tensors[i];
            size_t ne = (size_t)vil_st_numel(t);
            if (ne > tmp_n) tmp = vil_realloc(tmp, ne * sizeof(float)), tmp_n = ne;
            if (vil_st_to_f32(t, tmp) != 0) {
                char nm[160];
                vil_error("'%s': tensor '%s' is not a floating-point tensor", files[k],
                          vil_printable(nm, sizeof nm, t->name));
                ok = 0;
                break;
            }
            for (size_t j = 0; j < ne; j++) sum[at + j] += tmp[j];
            at += ne;
        }
        if (k > 0) vil_st_free(&other);
    }
    if (ok) ok = write_mean(out, &first, first_pth, sum, total, files, n) == 0;
    vil_st_free(&first);
    free(sum), free(tmp);
    return ok ? 0 : -1;
}

/* the flags' values: their defaults set by vil_cmd_avg, then filled by vil_args_parse */
typedef struct {
    const char *out;
    int ema;
} Flags;
static Flags o;

static const VilArg ARGS[] = {
    {"--out", VIL_ARG_STR, &o.out, "the averaged checkpoint (.safetensors) to write", .required = 1},
    {"--ema", VIL_ARG_FLAG, &o.ema, "average .pth training checkpoints' model_ema instead of their model"},
};

const VilArgSpec vil_cmd_avg_spec = {
    "avg", "CKPT... --out F.safetensors [--ema]",
    "Writes the element-wise mean of the weights of checkpoints of one network\n"
    "(timm's avg_checkpoints.py): summed in double, written as float32, with the\n"
    "first file's metadata (config, classes, step) and the list of the sources.\n"
    "A run folder stands for its step_N.safetensors snapshots (save_every_steps).\n"
    "Every input is checked before anything is written: another network, class\n"
    "count or image size, or a NaN or infinite value, is refused, naming the\n"
    "file (and the tensor). --out may not be one of the inputs. A run's EMA\n"
    "weights are RUN/ema.safetensors; --ema takes a .pth's model_ema.",
    ARGS, (int)(sizeof ARGS / sizeof ARGS[0]), 1, -1};

int vil_cmd_avg(int argc, char **argv) {
    o = (Flags){0};
    char **pos;
    int npos;
    int rc = vil_args_parse_all(&vil_cmd_avg_spec, argc, argv, &pos, &npos);
    if (rc >= 0) return rc;
    const char *out = o.out;
    char **files = NULL;
    int n = 0;
    vil_inputs_track(1);
    rc = gather(pos, npos, &files, &n);
    for (int k = 0; k < n; k++) vil_input_add(files[k]);
    if (rc == 0 && vil_output_check(out, ".safetensors", "--out") != 0) rc = 2;
    if (rc == 0 && average(out, files, n, o.ema) != 0) rc = 1;
    if (rc == 0) {
        /* the result read back as a checkpoint: the network it is */
        VilModel m;
        VilCheckpointMeta meta;
        rc = vil_checkpoint_load(out, &vil_backend_cpu, NULL, &m, &meta) == 0 ? 0 : 1;
        if (rc == 0) {
            char shown[1024];
            printf("averaged %d checkpoints (%zu parameters, %s) into %s\n", n, m.param_count, m.cfg.name,
                   vil_printable(shown, sizeof shown, out));
            vil_model_free(&m);
            vil_checkpoint_meta_free(&meta);
        }
    }
    for (int i = 0; i < n; i++) free(files[i]);
    free(files), free(pos);
    return rc;
}
