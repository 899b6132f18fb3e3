/* tfevents.c: TensorBoard event files of scalar summaries (the format is in tfevents.h). The
 * protobuf encoding is done by hand: three messages, five fields, no library needed. */
#define _GNU_SOURCE
#include "train/tfevents.h"

#include "vil/common.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Records are assembled with memcpy in the host's byte order and must be little-endian. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "tfevents.c assumes a little-endian host");

struct VilTfEvents {
    FILE *f;
    char *path;
    int broken; /* a write failed: the file may end in a partial record, so nothing more goes in */
};

/* ---- CRC32C ---- */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[i] = c;
    }
}

uint32_t vil_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    crc = ~crc; /* the init and final xor with 0xFFFFFFFF, undone here so that calls chain */
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return ~crc;
}

uint32_t vil_crc32c_masked(const void *data, size_t n) {
    uint32_t c = vil_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---- protobuf encoding ---- */
enum { WIRE_VARINT = 0, WIRE_64BIT = 1, WIRE_LEN = 2, WIRE_32BIT = 5 };

static size_t put_varint(unsigned char *p, uint64_t v) {
    size_t n = 0;
    for (; v >= 0x80; v >>= 7) p[n++] = (unsigned char)(v | 0x80);
    p[n++] = (unsigned char)v;
    return n;
}

static size_t put_key(unsigned char *p, int field, int wire) {
    return put_varint(p, (uint64_t)field << 3 | (uint64_t)wire);
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    for (; v >= 0x80; v >>= 7) n++;
    return n;
}

/* Event's wall_time and step, left out when 0 as proto3 leaves out default values (the
 * serializer compares the bits: -0.0 is written). A negative step is a 10-byte varint. */
static size_t put_time_step(unsigned char *p, double wall_time, int64_t step) {
    size_t n = 0;
    uint64_t bits;
    memcpy(&bits, &wall_time, 8);
    if (bits) {
        n += put_key(p + n, 1, WIRE_64BIT);
        memcpy(p + n, &wall_time, 8);
        n += 8;
    }
    if (step) {
        n += put_key(p + n, 2, WIRE_VARINT);
        n += put_varint(p + n, (uint64_t)step);
    }
    return n;
}

/* Big enough for an Event of one Value with the longest tag, and the record framing. */
#define RECORD_CAP (12 + VIL_TFEVENTS_TAG_MAX + 64)

/* Frames the Event in rec[12..12 + n) as a TFRecord and appends it to the file. 0 or -1. */
static int write_record(VilTfEvents *w, unsigned char *rec, size_t n) {
    if (w->broken) return -1;
    uint64_t len = n;
    memcpy(rec, &len, 8);
    uint32_t c = vil_crc32c_masked(rec, 8);
    memcpy(rec + 8, &c, 4);
    c = vil_crc32c_masked(rec + 12, n);
    memcpy(rec + 12 + n, &c, 4);
    if (fwrite(rec, 1, n + 16, w->f) != n + 16) {
        vil_error("cannot write to '%s': %s", w->path, vil_errno_str());
        w->broken = 1;
        return -1;
    }
    return 0;
}

static int valid_time(double t) { return isfinite(t) && t >= 0; }

/* ---- the writer ---- */
VilTfEvents *vil_tfevents_open(const char *dir, double wall_time) {
    if (!dir || !*dir) {
        vil_error("TensorBoard log folder: the name is empty");
        return NULL;
    }
    if (!valid_time(wall_time) || wall_time >= 1e11) {
        vil_error("TensorBoard event file: wall time %g is not a time since the epoch", wall_time);
        return NULL;
    }
    if (vil_mkdir_p(dir) != 0) return NULL;
    char host[256];
    if (gethostname(host, sizeof host) != 0 || !host[0]) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = 0; /* gethostname need not terminate a name it cut */
    size_t dlen = strlen(dir);
    const char *sep = dir[dlen - 1] == '/' ? "" : "/";
    size_t cap = dlen + sizeof host + 96;
    VilTfEvents *w = vil_calloc(1, sizeof *w);
    w->path = vil_malloc(cap);
    /* "x" (O_EXCL): another writer of this process and second gets the next free suffix */
    for (int k = 0; !w->f && k < 1000; k++) {
        int at = snprintf(w->path, cap, "%s%sevents.out.tfevents.%010lld.%s.%ld.vil", dir, sep,
                          (long long)wall_time, host, (long)getpid());
        if (k) snprintf(w->path + at, cap - (size_t)at, ".%d", k);
        w->f = fopen(w->path, "wbx");
        if (!w->f && errno != EEXIST) break;
    }
    if (!w->f) {
        vil_error("cannot create the TensorBoard event file '%s': %s", w->path, vil_errno_str());
        free(w->path);
        free(w);
        return NULL;
    }
    static const char version[] = "brain.Event:2";
    unsigned char rec[64];
    size_t n = 12 + put_time_step(rec + 12, wall_time, 0);
    n += put_key(rec + n, 3, WIRE_LEN);
    n += put_varint(rec + n, sizeof version - 1);
    memcpy(rec + n, version, sizeof version - 1);
    n += sizeof version - 1;
    if (write_record(w, rec, n - 12) != 0 || vil_tfevents_flush(w) != 0) {
        fclose(w->f);
        unlink(w->path); /* a file that is not a valid event file would only confuse TensorBoard */
        free(w->path);
        free(w);
        return NULL;
    }
    return w;
}

int vil_tfevents_scalar(VilTfEvents *w, const char *tag, int64_t step, double wall_time,
                        float value) {
    size_t tlen = tag ? strlen(tag) : 0;
    if (tlen == 0 || tlen > VIL_TFEVENTS_TAG_MAX) {
        vil_error("TensorBoard scalar tag: %zu bytes (1 to %d)", tlen, VIL_TFEVENTS_TAG_MAX);
        return VIL_EUSAGE;
    }
    /* protobuf parsers reject a proto3 string that is not UTF-8: TensorBoard would drop it */
    if (vil_utf8_invalid_at((const unsigned char *)tag, tlen) != tlen) {
        char shown[96];
        vil_error("TensorBoard scalar tag '%s' is not UTF-8", vil_printable(shown, sizeof shown, tag));
        return VIL_EUSAGE;
    }
    if (!valid_time(wall_time)) {
        vil_error("TensorBoard scalar '%s': wall time %g is not a time since the epoch", tag,
                  wall_time);
        return VIL_EUSAGE;
    }
    /* Event { wall_time, step, summary: Summary { value: Value { tag, simple_value } } } */
    size_t value_len = 1 + varint_size(tlen) + tlen + 1 + 4;
    size_t summary_len = 1 + varint_size(value_len) + value_len;
    unsigned char rec[RECORD_CAP];
    size_t n = 12 + put_time_step(rec + 12, wall_time, step);
    n += put_key(rec + n, 5, WIRE_LEN);
    n += put_varint(rec + n, summary_len);
    n += put_key(rec + n, 1, WIRE_LEN);
    n += put_varint(rec + n, value_len);
    n += put_key(rec + n, 1, WIRE_LEN);
    n += put_varint(rec + n, tlen);
    memcpy(rec + n, tag, tlen);
    n += tlen;
    n += put_key(rec + n, 2, WIRE_32BIT); /* simple_value sits in a oneof: written even when 0 */
    memcpy(rec + n, &value, 4);
    n += 4;
    return write_record(w, rec, n - 12);
}

int vil_tfevents_restart(VilTfEvents *w, int64_t step, double wall_time) {
    if (!valid_time(wall_time)) {
        vil_error("TensorBoard restart record: wall time %g is not a time since the epoch", wall_time);
        return VIL_EUSAGE;
    }
    /* Event { wall_time, step, session_log: SessionLog { status: START (1) } } */
    unsigned char rec[64];
    size_t n = 12 + put_time_step(rec + 12, wall_time, step);
    n += put_key(rec + n, 7, WIRE_LEN);
    n += put_varint(rec + n, 2);
    n += put_key(rec + n, 1, WIRE_VARINT);
    n += put_varint(rec + n, 1);
    return write_record(w, rec, n - 12);
}

int vil_tfevents_remove_all(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        vil_error("cannot list '%s': %s", dir, vil_errno_str());
        return -1;
    }
    static const char prefix[] = "events.out.tfevents.";
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, sizeof prefix - 1) != 0) continue;
        char *path = vil_path_join(dir, de->d_name);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            if (unlink(path) != 0) {
                vil_error("cannot remove the earlier TensorBoard event file '%s': %s", path,
                          vil_errno_str());
                free(path);
                closedir(d);
                return -1;
            }
            removed++;
        }
        free(path);
    }
    closedir(d);
    return removed;
}

int vil_tfevents_flush(VilTfEvents *w) {
    if (w->broken) return -1;
    if (fflush(w->f) != 0) {
        vil_error("cannot write to '%s': %s", w->path, vil_errno_str());
        w->broken = 1;
        return -1;
    }
    return 0;
}

int vil_tfevents_close(VilTfEvents *w) {
    if (!w) return 0;
    int rc = vil_tfevents_flush(w);
    if (fclose(w->f) != 0 && rc == 0) {
        vil_error("cannot close '%s': %s", w->path, vil_errno_str());
        rc = -1;
    }
    free(w->path);
    free(w);
    return rc;
}

const char *vil_tfevents_path(const VilTfEvents *w) { return w->path; }
