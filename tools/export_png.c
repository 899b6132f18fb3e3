/* export_png.c: writes the first N samples of a dataset split as PNG files, for `vil classify`
 * demonstrations on IDX data (Fashion-MNIST) that has no image files of its own.
 *   build/tools/export_png DATA SPLIT N OUTDIR
 * Prints "FILE<TAB>label<TAB>class name" per image. */
#include <stb_image_write.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "vil/common.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: export_png DATA SPLIT N OUTDIR\n");
        return 2;
    }
    long n;
    if (vil_parse_int(argv[3], &n) != 0 || n < 1) {
        fprintf(stderr, "export_png: N must be a positive integer, got '%s'\n", argv[3]);
        return 2;
    }
    VilDataset *ds = vil_dataset_open(argv[1], argv[2], NULL);
    if (!ds) return 1;
    if (mkdir(argv[4], 0755) != 0 && access(argv[4], W_OK) != 0) {
        vil_error("cannot create '%s': %s", argv[4], vil_errno_str());
        vil_dataset_free(ds);
        return 1;
    }
    int rc = 0;
    if (n > vil_dataset_size(ds)) n = vil_dataset_size(ds);
    for (int i = 0; i < n && rc == 0; i++) {
        VilImage im;
        VilErrCapture cap;
        vil_error_capture(&cap);
        int bad = vil_dataset_read_image(ds, i, vil_dataset_channels(ds), &im, NULL) != 0;
        vil_error_release(&cap);
        if (bad) {
            vil_error("sample %d: %s", i, cap.msg);
            rc = 1;
            break;
        }
        int y = vil_dataset_label(ds, i);
        char file[4096];
        snprintf(file, sizeof file, "%s/%s_%04d.png", argv[4], argv[2], i);
        if (!stbi_write_png(file, im.w, im.h, im.c, im.px, im.w * im.c)) {
            vil_error("cannot write '%s'", file);
            rc = 1;
        } else {
            printf("%s\t%d\t%s\n", file, y, vil_dataset_class_name(ds, y));
        }
        vil_image_free(&im);
    }
    vil_dataset_free(ds);
    return rc;
}
