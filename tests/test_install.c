/* test_install.c: libvil as a user gets it. The shared library exports exactly include/vil.h's
 * functions (nm -D against the header's declarations) under its SONAME; `make install` into a
 * temporary prefix, examples/classify.c built there with pkg-config alone and run against the
 * installed library, its JSON lines against `vil classify --json` on the same images (the same
 * classes and probabilities, logits within 1e-5: the example runs batches of 1, vil classify of
 * 16); `make uninstall` leaves no file behind. Run from the repository root after the build
 * ($VIL_BUILD: the build folder, default build). */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_corpus.h"
#include "model_testing.h"
#include "testing.h"
#include "formats/checkpoint.h"

static char out[1 << 16];

/* names of the header's VIL_API declarations, sorted, one per line, into dst */
static void header_names(char *dst, size_t cap) {
    t_run("grep -o '^VIL_API [^(]*(' include/vil.h | sed 's/($//; s/.*[ *]//' | sort", dst, cap);
}

static void test_exports(const char *build) {
    char cmd[4096], want[8192];
    header_names(want, sizeof want);
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s/lib/libvil.so | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort",
             build);
    int rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0 && t_count(want, "\n") >= 25, "the header declares %d functions", t_count(want, "\n"));
    T_CHECK(rc == 0 && strcmp(out, want) == 0, "exported = declared\n--- exported:\n%s--- declared:\n%s", out, want);
    snprintf(cmd, sizeof cmd, "objdump -p %s/lib/libvil.so | awk '/SONAME/ {print $2}'", build);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && strcmp(out, "libvil.so.0\n") == 0, "SONAME %s", out);
}

/* the numbers of one JSON line: logits and topk (index, prob, name) */
static int same_result(const cJSON *a, const cJSON *b, double *err) {
    const cJSON *la = cJSON_GetObjectItem(a, "logits"), *lb = cJSON_GetObjectItem(b, "logits");
    const cJSON *ta = cJSON_GetObjectItem(a, "topk"), *tb = cJSON_GetObjectItem(b, "topk");
    int n = cJSON_GetArraySize(la);
    if (n < 1 || n != cJSON_GetArraySize(lb) || cJSON_GetArraySize(ta) != cJSON_GetArraySize(tb)) return 0;
    double num = 0, den = 0;
    for (int i = 0; i < n; i++) {
        double x = cJSON_GetArrayItem(la, i)->valuedouble, y = cJSON_GetArrayItem(lb, i)->valuedouble;
        num += (x - y) * (x - y), den += y * y;
    }
    *err = fmax(*err, sqrt(num / (den > 0 ? den : 1)));
    for (int k = 0; k < cJSON_GetArraySize(ta); k++) {
        const cJSON *x = cJSON_GetArrayItem(ta, k), *y = cJSON_GetArrayItem(tb, k);
        const cJSON *nx = cJSON_GetObjectItem(x, "name"), *ny = cJSON_GetObjectItem(y, "name");
        if (cJSON_GetObjectItem(x, "index")->valueint != cJSON_GetObjectItem(y, "index")->valueint ||
            fabs(cJSON_GetObjectItem(x, "prob")->valuedouble - cJSON_GetObjectItem(y, "prob")->valuedouble) > 1e-5 ||
            !cJSON_IsString(nx) || !cJSON_IsString(ny) || strcmp(nx->valuestring, ny->valuestring) != 0)
            return 0;
    }
    return 1;
}

/* the example's lines against vil classify's, line by line: how many agree */
static int compare_lines(char *ex, char *cli, int n, double *err) {
    int good = 0;
    char *sa, *sb, *a = strtok_r(ex, "\n", &sa), *b = strtok_r(cli, "\n", &sb);
    for (int i = 0; i < n && a && b; i++, a = strtok_r(NULL, "\n", &sa), b = strtok_r(NULL, "\n", &sb)) {
        cJSON *ja = cJSON_Parse(a), *jb = cJSON_Parse(b);
        const cJSON *fa = cJSON_GetObjectItem(ja, "file"), *fb = cJSON_GetObjectItem(jb, "file");
        good += ja && jb && cJSON_IsString(fa) && cJSON_IsString(fb) && !strcmp(fa->valuestring, fb->valuestring) &&
                same_result(ja, jb, err);
        cJSON_Delete(ja);
        cJSON_Delete(jb);
    }
    return good;
}

static void test_install(const char *build) {
    char *dir = corpus_mkdtemp("install"), cmd[16384], model[4096], imgs[4096] = "";
    snprintf(model, sizeof model, "%s/tiny.safetensors", dir);
    VilModel m;
    t_tiny_model(&m);
    char *names[3] = {"zero \"q\"", "one", "two"};
    T_CHECK(vil_checkpoint_save(&m, model, 0, names, 3, NULL) == 0, "the model written");
    vil_model_free(&m);
    for (int i = 0; i < 3; i++) {
        char p[4200];
        snprintf(p, sizeof p, "%s/img%d.%s", dir, i, i == 2 ? "png" : "jpg");
        if (i == 2) corpus_write_png(p, 23, 31, 2, i);
        else corpus_write_jpeg(p, 40 + 9 * i, 30, 3, i, i, 0);
        strncat(imgs, " ", sizeof imgs - strlen(imgs) - 1);
        strncat(imgs, p, sizeof imgs - strlen(imgs) - 1);
    }
    /* the build's own CUDA= (the first word of its options file): make then has nothing to rebuild */
    char opt[64] = "", optcmd[4200];
    snprintf(optcmd, sizeof optcmd, "head -c 6 %s/options", build);
    t_run(optcmd, opt, sizeof opt);
    snprintf(cmd, sizeof cmd, "make --no-print-directory install BUILD=%s %s PREFIX=%s/prefix > %s/install.log 2>&1",
             build, opt, dir, dir);
    int rc = t_run(cmd, NULL, 0);
    T_CHECK(rc == 0, "make install into %s/prefix (rc %d; %s/install.log)", dir, rc, dir);
    snprintf(cmd, sizeof cmd, "cd %s/prefix && find . -type f -o -type l | sort", dir);
    t_run(cmd, out, sizeof out);
    T_CHECK(strstr(out, "./include/vil.h\n") && strstr(out, "./lib/libvil.so\n") && strstr(out, "./lib/libvil.so.0\n") &&
                strstr(out, "./lib/libvil.a\n") && strstr(out, "./lib/pkgconfig/vil.pc\n") && strstr(out, "./bin/vil\n"),
            "installed:\n%s", out);
    snprintf(cmd, sizeof cmd,
             "PKG_CONFIG_PATH=%s/prefix/lib/pkgconfig cc -o %s/classify examples/classify.c "
             "$(PKG_CONFIG_PATH=%s/prefix/lib/pkgconfig pkg-config --cflags --libs vil) 2>&1",
             dir, dir, dir);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "examples/classify.c built with pkg-config: %s", out);
    /* and linked statically against the installed libvil.a (pkg-config --static's libraries) */
    snprintf(cmd, sizeof cmd,
             "P=%s/prefix/lib/pkgconfig; cc -o %s/classify_static examples/classify.c "
             "$(PKG_CONFIG_PATH=$P pkg-config --cflags vil) %s/prefix/lib/libvil.a "
             "$(PKG_CONFIG_PATH=$P pkg-config --static --libs vil | sed 's/-lvil //') 2>&1 && "
             "%s/classify_static --model %s --device cpu %s | cmp - %s/shared.json 2>&1",
             dir, dir, dir, dir, model, imgs, dir);
    char shared[16384];
    snprintf(shared, sizeof shared, "LD_LIBRARY_PATH=%s/prefix/lib %s/classify --model %s --device cpu%s > %s/shared.json",
             dir, dir, model, imgs, dir);
    t_run(shared, NULL, 0);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 0, "the example linked with the installed libvil.a prints what the shared one does: %s", out);
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s/prefix/lib ldd %s/classify | grep -c '%s/prefix/lib/libvil.so.0'", dir,
             dir, dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && atoi(out) == 1, "the example runs against the installed libvil.so");
    static char ex[1 << 16], cli[1 << 16];
    const char *flags[] = {"", "--crop-pct 0.6", "--img-size 24"};
    for (int f = 0; f < 3; f++) {
        snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s/prefix/lib %s/classify --model %s --device cpu %s%s", dir, dir,
                 model, flags[f], imgs);
        int r1 = t_run(cmd, ex, sizeof ex);
        snprintf(cmd, sizeof cmd, "bin/vil classify --json --device cpu --model %s %s%s 2>/dev/null", model, flags[f],
                 imgs);
        int r2 = t_run(cmd, cli, sizeof cli);
        double err = 0;
        int good = compare_lines(ex, cli, 3, &err);
        if (good != 3) err = NAN;
        T_CHECK(r1 == 0 && r2 == 0 && good == 3, "example = vil classify --json %s: %d of 3 lines (rc %d, %d)",
                flags[f], good, r1, r2);
        T_CLOSE("example logits against vil classify's", err, 1e-5);
    }
    snprintf(cmd, sizeof cmd, "LD_LIBRARY_PATH=%s/prefix/lib %s/classify --model %s/none.safetensors %s 2>&1", dir, dir,
             dir, imgs);
    rc = t_run(cmd, out, sizeof out);
    T_CHECK(rc == 1 && strstr(out, "none.safetensors"), "a missing model: rc %d, %s", rc, out);
    snprintf(cmd, sizeof cmd, "make --no-print-directory uninstall BUILD=%s %s PREFIX=%s/prefix > /dev/null 2>&1 && "
             "cd %s/prefix && find . -type f -o -type l | wc -l", build, opt, dir, dir);
    T_CHECK(t_run(cmd, out, sizeof out) == 0 && atoi(out) == 0, "make uninstall leaves %d files", atoi(out));
    corpus_rmtree(dir);
    free(dir);
}

int main(void) {
    if (T_ASAN) { /* make install would relink bin/vil from the sanitized objects */
        printf("skipped under AddressSanitizer: test_install checks the release build (make test)\n");
        return t_finish();
    }
    const char *build = getenv("VIL_BUILD") ? getenv("VIL_BUILD") : "build";
    test_exports(build);
    test_install(build);
    return t_finish();
}
