/* fuzz_checkpoint.c: libFuzzer harness for what `vil info --model FILE` does with untrusted
 * bytes: the safetensors parse, the metadata (config JSON, class names), the architecture
 * inferred from tensor shapes, the check of every tensor and the model's allocation and load
 * on the CPU backend, at the file's own resolution and at 32 px (pos_embed interpolated).
 * A load must give a model whose parameter count adds up; a failure must say why. Built by
 * tests/fuzz.mk, which runs it with -malloc_limit_mb, so a file that makes the loader ask for
 * gigabytes is a finding, and also builds this file with -DVIL_FUZZ_SEED into the program that
 * writes the seed checkpoints (tiny models of both architectures, with and without metadata). */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vil/backend.h"
#include "formats/checkpoint.h"
#include "vil/common.h"
#include "vil/model.h"
#include "formats/safetensors.h"

#ifndef VIL_FUZZ_SEED

static char dir[64], file[96];
static int counting;     /* stderr is the counting stream */
static size_t err_bytes; /* what vil_error wrote since the last reset */

static ssize_t count_write(void *cookie, const char *buf, size_t n) {
    (void)cookie;
    (void)buf;
    err_bytes += n;
    return (ssize_t)n;
}

static void cleanup(void) {
    unlink(file);
    rmdir(dir);
}

/* A per-process folder for the input file (vil_checkpoint_load takes a path), and vil's
 * messages counted instead of printed: `stderr` (a plain variable in glibc) points at a counting
 * stream, while libFuzzer (its own copy of the old pointer) and the sanitizers (fd 2) still
 * print. VIL_FUZZ_VERBOSE=1 keeps the messages, for reading a reproducer's. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/fuzz_checkpoint.XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        perror("fuzz_checkpoint: mkdtemp");
        exit(1);
    }
    snprintf(file, sizeof file, "%s/input", dir);
    atexit(cleanup);
    if (!getenv("VIL_FUZZ_VERBOSE")) {
        FILE *f = fopencookie(NULL, "w", (cookie_io_functions_t){.write = count_write});
        if (!f) {
            perror("fuzz_checkpoint: fopencookie");
            exit(1);
        }
        setvbuf(f, NULL, _IONBF, 0);
        stderr = f;
        counting = 1;
    }
    return 0;
}

static void write_input(const uint8_t *data, size_t size) {
    FILE *f = fopen(file, "wb");
    if (!f || fwrite(data, 1, size, f) != size || fclose(f) != 0) {
        perror("fuzz_checkpoint: writing the input file");
        abort();
    }
}

/* the contract of a successful load; st: the bytes as safetensors, or NULL (not one) */
static void check_model(const VilModel *m, const VilCheckpointMeta *meta,
                        const VilSafetensors *st, int img_size) {
    const VilConfig *c = &m->cfg;
    if (!m->params || m->n_tensors < 1 || m->param_count != vil_model_count_params(c) ||
        m->buf_len < m->param_count)
        abort();
    size_t sum = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const VilParamInfo *p = &m->info[i];
        size_t n = 1;
        for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
        if (n != p->numel || p->offset + vil_param_extent(p) > m->buf_len) abort();
        sum += n;
    }
    if (sum != m->param_count) abort();
    if (meta->n_classes != c->num_classes || meta->img_size != c->img_size) abort();
    if (img_size && c->img_size != img_size) abort();
    for (int i = 0; meta->class_names && i < meta->n_classes; i++)
        if (!meta->class_names[i]) abort();
    if (strcmp(meta->format, "safetensors") == 0) {
        /* every tensor of the file is a parameter and every parameter is in the file: the
         * same count, unless pos_embed was resized */
        if (!st) abort();
        size_t in_file = 0;
        for (int i = 0; i < st->n_tensors; i++) in_file += (size_t)vil_st_numel(&st->tensors[i]);
        if (!meta->trained_grid && in_file != m->param_count) abort();
    }
}

/* A mutation inside the JSON header (a longer number in the config, a renamed tensor) moves the
 * header's end, and the 8-byte length in front of it, no longer right, gets the file refused
 * before anything else runs. So every other mutation is followed by setting that length to
 * where the header's JSON object now closes (the spaces of vil's padding included). */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

static void fix_header_length(uint8_t *data, size_t size) {
    size_t i = 8;
    while (i < size && (data[i] == ' ' || data[i] == '\n')) i++;
    if (i >= size || data[i] != '{') return;
    int depth = 0, in_str = 0;
    for (; i < size; i++) {
        uint8_t c = data[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if ((c == '}' || c == ']') && --depth == 0) {
            break;
        }
    }
    if (i >= size) return;
    for (i++; i < size && data[i] == ' '; i++) {}
    uint64_t n = i - 8;
    for (int b = 0; b < 8; b++) data[b] = (uint8_t)(n >> (8 * b));
}

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if ((seed & 1) && size > 8) fix_header_length(data, size);
    return size;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    VilSafetensors st;
    VilErrCapture cap;
    vil_error_capture(&cap);
    int parsed = vil_st_parse(data, size, &st) == 0;
    vil_error_release(&cap);
    if (!parsed && cap.msg[0] == 0) abort(); /* a failure must say why */
    write_input(data, size);
    static const VilCheckpointOpts at32 = {.img_size = 32};
    const VilCheckpointOpts *opts[] = {NULL, &at32};
    for (int k = 0; k < 2; k++) {
        VilModel m;
        VilCheckpointMeta meta;
        err_bytes = 0;
        if (vil_checkpoint_load(file, &vil_backend_cpu, opts[k], &m, &meta) == 0) {
            check_model(&m, &meta, parsed ? &st : NULL, opts[k] ? opts[k]->img_size : 0);
            vil_checkpoint_meta_free(&meta);
            vil_model_free(&m);
        } else if (counting && err_bytes == 0) {
            abort(); /* a failure must say why */
        }
    }
    if (parsed) vil_st_free(&st);
    return 0;
}

#else /* VIL_FUZZ_SEED: the seed corpus */

static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x7fff + ((u >> 16) & 1)) & 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* the model's tensors as float32 or bfloat16: alone (a bare state dict, as
 * safetensors.torch.save_file writes one), with one more tensor named after block `extra`
 * (extra > 0), or with vil's metadata claiming the config `claim` instead of m's */
static int save_tensors(const VilModel *m, const char *path, int bf16, int extra,
                        const VilConfig *claim) {
    float *host = vil_malloc(m->buf_len * sizeof(float));
    vil_model_get_params(m, host);
    vil_model_pack(m, host, host);
    uint16_t *half = vil_malloc(m->param_count * sizeof(uint16_t));
    for (size_t i = 0; i < m->param_count; i++) {
        float r = bf16_round(host[i]);
        uint32_t u;
        memcpy(&u, &r, 4);
        half[i] = (uint16_t)(u >> 16);
    }
    VilStWriter *w = vil_st_writer_new();
    size_t at = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const VilParamInfo *p = &m->info[i];
        if (bf16) vil_st_writer_add(w, p->name, VIL_ST_BF16, p->ndim, p->shape, half + at);
        else vil_st_writer_add(w, p->name, VIL_ST_F32, p->ndim, p->shape, host + at);
        at += p->numel;
    }
    char name[64];
    const int64_t one = 1;
    snprintf(name, sizeof name, "layers.%d.mixer.D", extra);
    if (extra > 0) vil_st_writer_add(w, name, VIL_ST_F32, 1, &one, host);
    char *cfg = claim ? vil_config_to_json(claim) : NULL, img[16];
    if (claim) {
        snprintf(img, sizeof img, "%d", claim->img_size);
        vil_st_writer_meta(w, "vil.config", cfg);
        vil_st_writer_meta(w, "vil.img_size", img);
    }
    int rc = vil_st_writer_save(w, path);
    vil_st_writer_free(w);
    free(cfg);
    free(half);
    free(host);
    return rc;
}

/* The files that found issue 30's defects: vil's own file with class names and vil.eval
 * {"crop_pct":0} (the names leaked), and with an int key of 1e300 in vil.config (cast before
 * its range check). */
static int save_reproducers(const VilModel *m, const char *dir, char **names) {
    char path[4096], *cfg = vil_config_to_json(&m->cfg);
    float *host = vil_malloc(m->buf_len * sizeof(float));
    vil_model_get_params(m, host);
    vil_model_pack(m, host, host);
    int rc = 0;
    for (int k = 0; k < 2 && rc == 0; k++) {
        VilStWriter *w = vil_st_writer_new();
        size_t at = 0;
        for (int i = 0; i < m->n_tensors; i++) {
            const VilParamInfo *p = &m->info[i];
            vil_st_writer_add(w, p->name, VIL_ST_F32, p->ndim, p->shape, host + at);
            at += p->numel;
        }
        char meta[8192];
        if (k == 0) {
            vil_st_writer_meta(w, "vil.config", cfg);
            snprintf(meta, sizeof meta, "[\"%s\",\"%s\",\"%s\"]", names[0], "dog", "bird");
            vil_st_writer_meta(w, "vil.class_names", meta);
            vil_st_writer_meta(w, "vil.eval", "{\"crop_pct\":0}");
            snprintf(path, sizeof path, "%s/repro_eval_crop0_names.safetensors", dir);
        } else {
            char *d = strstr(cfg, "\"depth\":");
            snprintf(meta, sizeof meta, "%.*s\"depth\":1e300%s", (int)(d - cfg), cfg, strchr(d, ','));
            vil_st_writer_meta(w, "vil.config", meta);
            snprintf(path, sizeof path, "%s/repro_config_depth_1e300.safetensors", dir);
        }
        rc = vil_st_writer_save(w, path);
        vil_st_writer_free(w);
    }
    free(host);
    free(cfg);
    return rc;
}

/* bare: 0 vil's own file; 1 float32 tensors alone, 2 bfloat16; 3 float32 and a tensor of block
 * 1023 (the depth inferred from the names: 1024); 4 vil's metadata claiming a network of 64
 * blocks of width 4096 over these small tensors. The last two are refused; they start the
 * search next to the files that could make a reader allocate gigabytes before it checks. */
typedef struct {
    const char *name, *arch;
    int img, patch, stride, chans, dim, depth, state, classes, bare;
} Seed;

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    static const Seed seeds[] = {
        {"vil_meta", "vil", 8, 4, 4, 3, 8, 2, 4, 3, 0},
        {"vim_meta_stride", "vim", 10, 4, 2, 1, 8, 1, 2, 2, 0},
        {"vil_bare", "vil", 8, 4, 4, 3, 8, 2, 4, 3, 1},
        {"vim_bare_bf16", "vim", 12, 4, 4, 1, 16, 1, 2, 4, 2},
        {"vil_bare_deep", "vil", 8, 4, 4, 3, 8, 2, 4, 3, 3},
        {"vim_meta_claims_big", "vim", 8, 4, 4, 3, 8, 1, 2, 3, 4},
    };
    char *names[] = {"cat", "dog, puppy", "\"quoted\" \xc3\xa9"};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        const Seed *s = &seeds[i];
        VilConfig c;
        vil_config_default(&c);
        snprintf(c.name, sizeof c.name, "seed_%s", s->name);
        snprintf(c.arch, sizeof c.arch, "%s", s->arch);
        c.img_size = s->img, c.patch_size = s->patch, c.stride = s->stride, c.in_chans = s->chans;
        c.embed_dim = s->dim, c.depth = s->depth, c.d_state = s->state, c.num_classes = s->classes;
        c.d_conv = 2;
        VilModel m;
        if (vil_config_finalize(&c) != 0 || vil_model_init(&m, &c, &vil_backend_cpu) != 0) return 1;
        vil_model_init_weights(&m, 1 + i);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.safetensors", argv[1], s->name);
        VilConfig big = c;
        big.embed_dim = 4096, big.depth = 64;
        int rc = s->bare == 0 ? vil_checkpoint_save(&m, path, 7, s->classes == 3 ? names : NULL, s->classes, NULL)
                 : s->bare == 4 ? save_tensors(&m, path, 0, 0, &big)
                 : save_tensors(&m, path, s->bare == 2, s->bare == 3 ? 1023 : 0, NULL);
        if (rc == 0 && i == 0) rc = save_reproducers(&m, argv[1], names);
        /* vil's own files as the .pth vil convert writes (vil_metadata beside the state dict) */
        if (rc == 0 && s->bare == 0) {
            snprintf(path, sizeof path, "%s/%s.pth", argv[1], s->name);
            rc = vil_checkpoint_save_from(&m, path, s->classes == 3 ? names : NULL, s->classes, NULL, "seed");
        }
        vil_model_free(&m);
        if (rc != 0) return 1;
    }
    return 0;
}

#endif
