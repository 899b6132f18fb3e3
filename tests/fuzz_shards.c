/* fuzz_shards.c: libFuzzer harness for the tar shard index (data/shards.c over libarchive): the
 * untrusted bytes as the one shard of a folder, opened as a dataset, then every sample's bytes
 * read at the offsets the index gave. An open must succeed with samples inside the file or fail
 * with a reason; a read must stay inside the file. Built by tests/fuzz.mk. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "vil/common.h"

static char g_dir[256], g_file[300];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_dir[0]) {
        snprintf(g_dir, sizeof g_dir, "%s/vil_fuzz_shards_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(g_dir)) abort();
        snprintf(g_file, sizeof g_file, "%s/x.tar", g_dir);
    }
    FILE *f = fopen(g_file, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    VilErrCapture cap;
    vil_error_capture(&cap);
    VilDataset *ds = vil_dataset_open(g_dir, NULL, NULL);
    if (ds) {
        VilBuffer b = {0};
        for (int i = 0; i < vil_dataset_size(ds); i++) {
            int l = vil_dataset_label(ds, i);
            if (l < 0 || l >= vil_dataset_num_classes(ds)) abort(); /* contract broken */
            if (vil_dataset_read_bytes(ds, i, &b) == 0 && b.size > size) abort();
        }
        vil_buffer_free(&b);
        vil_dataset_free(ds);
    }
    vil_error_release(&cap);
    if (!ds && cap.msg[0] == 0) abort(); /* a failure must say why */
    return 0;
}
