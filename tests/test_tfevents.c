/* test_tfevents.c: the TensorBoard event-file writer. CRC32C against published vectors and the
 * masking against TensorBoard's own implementation; a file written and read back by a reader
 * of this file (its own bitwise CRC32C, TFRecord framing, a strict protobuf decoder), which
 * must also catch a flipped byte and a cut record; a file written by TensorBoard's
 * EventFileWriter (tests/data/tfevents/reference.tfevents, from tests/reference/make_tfevents.py)
 * decoded to its known contents, and the same scalars written by vil compared with it byte for
 * byte; usage errors; a write error (the file-size limit standing in for a full disk).
 *
 * VIL_TFEVENTS_OUT=DIR keeps vil's copy of the reference scalars in DIR, for
 * `python3 tests/reference/make_tfevents.py --check DIR` (TensorBoard's own reader). */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/testing.h"
#include "train/tfevents.h"
#include "vil/common.h"

#define REFERENCE "tests/data/tfevents/reference.tfevents"

/* ---- an independent reader ---- */

/* CRC32C bit by bit, straight from the polynomial: shares nothing with tfevents.c's table */
static uint32_t ref_crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    }
    return c ^ 0xFFFFFFFFu;
}

static uint32_t ref_masked(const uint8_t *p, size_t n) {
    uint32_t c = ref_crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct {
    const uint8_t *data; /* the Event bytes, inside the file's buffer */
    size_t len;
} Rec;

#define MAX_RECS 2048

/* Splits a TFRecord file into records, checking both CRCs of each. The number of records, or
 * -1 with the reason in why. */
static int read_records(const uint8_t *buf, size_t n, Rec *out, char *why) {
    size_t at = 0;
    int k = 0;
    while (at < n) {
        if (n - at < 12) return sprintf(why, "record %d: header cut at %zu bytes", k, n - at), -1;
        uint64_t len = le64(buf + at);
        if (le32(buf + at + 8) != ref_masked(buf + at, 8))
            return sprintf(why, "record %d: header crc mismatch", k), -1;
        if (len > n - at - 12 || n - at - 12 - len < 4)
            return sprintf(why, "record %d: data cut (length %llu)", k, (unsigned long long)len), -1;
        if (le32(buf + at + 12 + len) != ref_masked(buf + at + 12, len))
            return sprintf(why, "record %d: data crc mismatch", k), -1;
        if (k == MAX_RECS) return sprintf(why, "more than %d records", MAX_RECS), -1;
        out[k++] = (Rec){buf + at + 12, len};
        at += 16 + len;
    }
    return k;
}

typedef struct {
    int has_wall, has_step, has_version, has_summary, has_source;
    int has_session, session_status; /* session_log (field 7) and its status (START = 1) */
    double wall;
    int64_t step;
    char version[64], source[128];
    int n_values, has_simple;
    char tag[VIL_TFEVENTS_TAG_MAX + 1];
    float simple;
} Ev;

typedef struct {
    const uint8_t *p, *end;
    int bad;
} Cur;

static uint64_t get_varint(Cur *c) {
    uint64_t v = 0;
    for (int s = 0; s < 70; s += 7) {
        if (c->p == c->end) break;
        uint8_t b = *c->p++;
        v |= (uint64_t)(b & 0x7F) << s;
        if (!(b & 0x80)) return v;
    }
    c->bad = 1; /* cut or longer than 10 bytes */
    return 0;
}

/* a length-delimited field: a sub-cursor over its bytes */
static Cur get_len(Cur *c) {
    uint64_t n = get_varint(c);
    Cur sub = {c->p, c->p, 1};
    if (c->bad || n > (uint64_t)(c->end - c->p)) return c->bad = 1, sub;
    sub = (Cur){c->p, c->p + n, 0};
    c->p += n;
    return sub;
}

static void get_fixed(Cur *c, void *dst, size_t n) {
    if ((size_t)(c->end - c->p) < n) {
        c->bad = 1;
        return;
    }
    memcpy(dst, c->p, n);
    c->p += n;
}

static void get_string(Cur *c, char *dst, size_t cap) {
    Cur s = get_len(c);
    size_t n = (size_t)(s.end - s.p);
    if (c->bad || n >= cap) {
        c->bad = 1;
        return;
    }
    memcpy(dst, s.p, n);
    dst[n] = 0;
}

/* Decodes an Event of the fields tfevents.h names, session_log with its status among them (and
 * source_metadata, which TensorBoard's writer adds to its first record). Any other field, or a known one with the wrong wire type,
 * fails: 0 or -1. */
static int decode_event(const Rec *r, Ev *e) {
    memset(e, 0, sizeof *e);
    Cur c = {r->data, r->data + r->len, 0};
    while (c.p < c.end && !c.bad) {
        uint64_t key = get_varint(&c);
        if (key == (1 << 3 | 1)) e->has_wall = 1, get_fixed(&c, &e->wall, 8);
        else if (key == (2 << 3 | 0)) e->has_step = 1, e->step = (int64_t)get_varint(&c);
        else if (key == (3 << 3 | 2)) e->has_version = 1, get_string(&c, e->version, sizeof e->version);
        else if (key == (10 << 3 | 2)) {
            Cur m = get_len(&c);
            e->has_source = 1;
            while (m.p < m.end && !m.bad) {
                if (get_varint(&m) != (1 << 3 | 2)) m.bad = 1;
                else get_string(&m, e->source, sizeof e->source);
            }
            c.bad |= m.bad;
        } else if (key == (7 << 3 | 2)) {
            Cur m = get_len(&c);
            e->has_session = 1;
            while (m.p < m.end && !m.bad) {
                if (get_varint(&m) != (1 << 3 | 0)) m.bad = 1;
                else e->session_status = (int)get_varint(&m);
            }
            c.bad |= m.bad;
        } else if (key == (5 << 3 | 2)) {
            Cur s = get_len(&c);
            e->has_summary = 1;
            while (s.p < s.end && !s.bad) {
                if (get_varint(&s) != (1 << 3 | 2)) {
                    s.bad = 1;
                    break;
                }
                Cur v = get_len(&s);
                e->n_values++;
                while (v.p < v.end && !v.bad) {
                    uint64_t k = get_varint(&v);
                    if (k == (1 << 3 | 2)) get_string(&v, e->tag, sizeof e->tag);
                    else if (k == (2 << 3 | 5)) e->has_simple = 1, get_fixed(&v, &e->simple, 4);
                    else v.bad = 1;
                }
                s.bad |= v.bad;
            }
            c.bad |= s.bad;
        } else c.bad = 1;
    }
    return c.bad ? -1 : 0;
}

static uint8_t *slurp(const char *path, size_t *n) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    uint8_t *b = vil_read_file(path, n);
    vil_error_release(&cap);
    if (!b) printf("cannot read %s: %s\n", path, cap.msg);
    return b;
}

static int same_bits(const void *a, const void *b, size_t n) { return memcmp(a, b, n) == 0; }

static char *tmpdir(void) {
    const char *t = getenv("TMPDIR");
    char *p = vil_malloc(4096);
    snprintf(p, 4096, "%s/vil_tfevents_XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(p)) {
        printf("mkdtemp %s: %s\n", p, strerror(errno));
        exit(1);
    }
    return p;
}

static void rmtree(const char *dir) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

/* ---- CRC32C ---- */
static void test_crc(void) {
    uint8_t b[32];
    memset(b, 0, 32);
    T_CHECK(vil_crc32c(0, b, 32) == 0x8A9136AAu, "RFC 3720 B.4: 32 zeros -> 8A9136AA (%08X)",
            vil_crc32c(0, b, 32));
    memset(b, 0xFF, 32);
    T_CHECK(vil_crc32c(0, b, 32) == 0x62A8AB43u, "32 x FF -> 62A8AB43 (%08X)", vil_crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)i;
    T_CHECK(vil_crc32c(0, b, 32) == 0x46DD794Eu, "0..31 -> 46DD794E (%08X)", vil_crc32c(0, b, 32));
    for (int i = 0; i < 32; i++) b[i] = (uint8_t)(31 - i);
    T_CHECK(vil_crc32c(0, b, 32) == 0x113FDB5Cu, "31..0 -> 113FDB5C (%08X)", vil_crc32c(0, b, 32));
    T_CHECK(vil_crc32c(0, "123456789", 9) == 0xE3069283u, "check value E3069283");
    T_CHECK(vil_crc32c(0, "", 0) == 0 && vil_crc32c(0x1234, "", 0) == 0x1234, "no bytes: crc unchanged");
    T_CHECK(vil_crc32c(vil_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u, "chained calls");
    /* masked values from TensorBoard's masked_crc32c (tensorflow_stub/pywrap_tensorflow.py) */
    T_CHECK(vil_crc32c_masked("123456789", 9) == 0xC78AB0E5u, "masked check value C78AB0E5");
    T_CHECK(vil_crc32c_masked(b, 0) == 0xA282EAD8u, "masked crc of nothing: the mask delta");
    memset(b, 0, 8);
    T_CHECK(vil_crc32c_masked(b, 8) == 0x07980329u, "masked crc of a zero length: 07980329");
    /* the reader's CRC agrees with the table on every length and alignment up to 300 bytes */
    uint8_t r[301];
    VilRng rng;
    vil_rng_seed(&rng, 7);
    for (int i = 0; i < 301; i++) r[i] = (uint8_t)vil_rng_u64(&rng);
    int bad = 0;
    for (size_t n = 0; n <= 300; n++) bad += vil_crc32c(0, r + (n & 1), n) != ref_crc32c(r + (n & 1), n);
    T_CHECK(bad == 0, "table and bitwise CRC32C agree on random data (%d differ)", bad);
}

/* ---- write, read back ---- */
static const struct {
    const char *tag;
    int64_t step;
    double wall;
    float value;
} MINE[] = {
    {"train/loss", 1, 1700000123.5, 2.5f},    {"train/lr", 1, 1700000123.5, 1e-3f},
    {"train/loss", 2, 1700000124.75, 2.25f},  {"eval/top1", 2, 1700000125.0, 12.5f},
    {"train/loss", 1000000, 1700000999.0, -0.0f},
};
#define N_MINE (int)(sizeof MINE / sizeof MINE[0])

static void test_roundtrip(const char *root) {
    char dir[4200], want[4600], host[256];
    snprintf(dir, sizeof dir, "%s/run/a/", root); /* missing parents, trailing slash */
    VilTfEvents *w = vil_tfevents_open(dir, 1700000123.5);
    T_CHECK(w != NULL, "open %s", dir);
    if (!w) return;
    if (gethostname(host, sizeof host) != 0) host[0] = 0;
    host[sizeof host - 1] = 0;
    snprintf(want, sizeof want, "%s/run/a/events.out.tfevents.1700000123.%s.%ld.vil", root, host,
             (long)getpid());
    T_CHECK(!strcmp(vil_tfevents_path(w), want), "file name %s (want %s)", vil_tfevents_path(w), want);

    /* the file_version record is on disk before any scalar */
    Rec recs[MAX_RECS];
    char why[128] = "";
    Ev e;
    size_t n;
    uint8_t *buf = slurp(vil_tfevents_path(w), &n);
    int k = buf ? read_records(buf, n, recs, why) : -1;
    T_CHECK(k == 1, "after open: 1 record on disk (%d; %s)", k, why);
    T_CHECK(k == 1 && decode_event(&recs[0], &e) == 0 && e.has_version &&
                !strcmp(e.version, "brain.Event:2") && e.has_wall && e.wall == 1700000123.5 && !e.has_step &&
                !e.has_summary && !e.has_source,
            "first record: wall_time and file_version brain.Event:2 alone");
    free(buf);

    for (int i = 0; i < N_MINE; i++)
        T_CHECK(vil_tfevents_scalar(w, MINE[i].tag, MINE[i].step, MINE[i].wall, MINE[i].value) == 0,
                "scalar %d", i);
    T_CHECK(vil_tfevents_flush(w) == 0, "flush");
    buf = slurp(vil_tfevents_path(w), &n); /* still open: flushed records are visible */
    k = buf ? read_records(buf, n, recs, why) : -1;
    T_CHECK(k == 1 + N_MINE, "after flush: %d records (%d; %s)", 1 + N_MINE, k, why);
    for (int i = 0; i < N_MINE && k == 1 + N_MINE; i++) {
        int ok = decode_event(&recs[1 + i], &e) == 0 && e.has_summary && e.n_values == 1 && e.has_simple &&
                 !e.has_version && !strcmp(e.tag, MINE[i].tag) && e.has_step && e.step == MINE[i].step &&
                 e.has_wall && e.wall == MINE[i].wall && same_bits(&e.simple, &MINE[i].value, 4);
        T_CHECK(ok, "record %d: %s step %lld wall %.2f value %g", i + 1, MINE[i].tag, (long long)MINE[i].step,
                MINE[i].wall, MINE[i].value);
    }
    free(buf);
    T_CHECK(vil_tfevents_close(w) == 0, "close");
    T_CHECK(vil_tfevents_close(NULL) == 0, "close(NULL) is a no-op");

    /* a second writer in the same second and process: a new file, the first one untouched */
    VilTfEvents *w2 = vil_tfevents_open(dir, 1700000123.9);
    const char *p2 = w2 ? vil_tfevents_path(w2) : "";
    T_CHECK(w2 && !strncmp(p2, want, strlen(want)) && !strcmp(p2 + strlen(want), ".1"), "same second: %s",
            p2);
    T_CHECK(w2 && strcmp(p2, want) > 0, "and it sorts after the first");
    vil_tfevents_close(w2);
    buf = slurp(want, &n);
    k = buf ? read_records(buf, n, recs, why) : -1;
    T_CHECK(k == 1 + N_MINE, "the first file keeps its %d records (%d)", 1 + N_MINE, k);

    /* the reader is not vacuous: every flipped byte and a cut record are caught */
    int missed = 0;
    for (size_t i = 0; buf && i < n; i++) {
        buf[i] ^= 0x20;
        if (read_records(buf, n, recs, why) >= 0) missed++;
        buf[i] ^= 0x20;
    }
    T_CHECK(buf && missed == 0, "each of %zu flipped bytes caught by a CRC (%d missed)", n, missed);
    if (buf) {
        buf[n - 5] ^= 1; /* the last record's data */
        T_CHECK(read_records(buf, n, recs, why) < 0 && strstr(why, "data crc"), "flipped data: %s", why);
        buf[n - 5] ^= 1;
        size_t second = 16 + recs[0].len; /* the second record's length field */
        buf[second] ^= 1;
        T_CHECK(read_records(buf, n, recs, why) < 0 && strstr(why, "header crc"), "flipped length: %s", why);
        buf[second] ^= 1;
        T_CHECK(read_records(buf, n - 1, recs, why) < 0 && strstr(why, "cut"), "cut last record: %s", why);
        T_CHECK(read_records(buf, n, recs, why) == 1 + N_MINE, "restored bytes read again");
    }
    free(buf);
}

/* ---- TensorBoard's own file ---- */
/* The table of tests/reference/make_tfevents.py (SCALARS), values as doubles: Python's
 * protobuf rounds them to float32 as the (float) cast does. */
static char LONG_TAG[151]; /* "long/" and 145 x: 2-byte length varints in Value and Summary */
static const struct {
    const char *tag;
    int64_t step;
    double wall, value;
} REF[] = {
    {"train/loss", 0, 1700000000.25, 2.302585},   {"train/loss", 1, 1700000001.5, 1.875},
    {"train/loss", 2, 1700000002.75, 0.0},        {"train/lr", 0, 1700000000.25, 0.1},
    {"train/lr", 300, 1700000003.0, 1e-05},       {"eval/top1", (int64_t)1 << 40, 1700000004.125, 76.5},
    {"eval/top1", -3, 1700000005.0, -1.5},        {"grad/gr\xc3\xb6\xc3\x9f" "e", 7, 0.0, INFINITY},
    {"grad/nan", 8, 1700000006.5, NAN},           {LONG_TAG, 9, 1700000007.0, 3.0e38},
};
#define N_REF (int)(sizeof REF / sizeof REF[0])

static void test_reference(const char *root) {
    memcpy(LONG_TAG, "long/", 5);
    memset(LONG_TAG + 5, 'x', 145);
    size_t n;
    uint8_t *ref = slurp(REFERENCE, &n);
    T_CHECK(ref != NULL, "read " REFERENCE);
    if (!ref) return;
    Rec rr[MAX_RECS], vr[MAX_RECS];
    char why[128] = "";
    Ev e;
    int k = read_records(ref, n, rr, why);
    T_CHECK(k == 1 + N_REF, "reference: %d records, CRCs good (%d; %s)", 1 + N_REF, k, why);
    if (k != 1 + N_REF) {
        free(ref);
        return;
    }
    /* TensorBoard's first record: its wall time, the version and the writer's name */
    T_CHECK(decode_event(&rr[0], &e) == 0 && e.has_version && !strcmp(e.version, "brain.Event:2") &&
                e.has_wall && e.wall > 1.7e9 && !e.has_step && e.has_source &&
                !strcmp(e.source, "tensorboard.summary.writer.event_file_writer"),
            "reference first record: file_version brain.Event:2 from %s", e.source);
    for (int i = 0; i < N_REF; i++) {
        float v = (float)REF[i].value;
        int ok = decode_event(&rr[1 + i], &e) == 0 && e.has_summary && e.n_values == 1 && e.has_simple &&
                 !strcmp(e.tag, REF[i].tag) && e.step == REF[i].step && e.has_step == (REF[i].step != 0) &&
                 e.wall == REF[i].wall && e.has_wall == (REF[i].wall != 0) && same_bits(&e.simple, &v, 4);
        T_CHECK(ok, "reference record %d: %.20s step %lld wall %.3f value %g", i + 1, REF[i].tag,
                (long long)REF[i].step, REF[i].wall, REF[i].value);
    }

    /* vil writes the same bytes for the same scalars */
    const char *keep = getenv("VIL_TFEVENTS_OUT");
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ref", root);
    VilTfEvents *w = vil_tfevents_open(keep && *keep ? keep : dir, 1700000000.0);
    T_CHECK(w != NULL, "open for the reference scalars");
    if (!w) {
        free(ref);
        return;
    }
    for (int i = 0; i < N_REF; i++)
        T_CHECK(vil_tfevents_scalar(w, REF[i].tag, REF[i].step, REF[i].wall, (float)REF[i].value) == 0,
                "scalar %d", i);
    char path[4600];
    snprintf(path, sizeof path, "%s", vil_tfevents_path(w));
    T_CHECK(vil_tfevents_close(w) == 0, "close");
    if (keep && *keep) printf("kept %s\n", path);
    size_t vn;
    uint8_t *vil = slurp(path, &vn);
    k = vil ? read_records(vil, vn, vr, why) : -1;
    T_CHECK(k == 1 + N_REF, "vil's file: %d records (%d; %s)", 1 + N_REF, k, why);
    for (int i = 1; i <= N_REF && k == 1 + N_REF; i++)
        T_CHECK(vr[i].len == rr[i].len && same_bits(vr[i].data, rr[i].data, rr[i].len),
                "record %d byte-identical to TensorBoard's (%zu and %zu bytes)", i, vr[i].len, rr[i].len);
    /* and so is everything after the first record, framing and CRCs included */
    size_t rskip = 16 + rr[0].len, vskip = vil ? 16 + vr[0].len : 0;
    T_CHECK(vil && k == 1 + N_REF && vn - vskip == n - rskip &&
                same_bits(vil + vskip, ref + rskip, n - rskip),
            "the files after their first record: %zu bytes alike", n - rskip);
    T_CHECK(k == 1 + N_REF && decode_event(&vr[0], &e) == 0 && e.wall == 1700000000.0 && e.has_version &&
                !strcmp(e.version, "brain.Event:2") && !e.has_source && !e.has_step,
            "vil's first record: wall_time and file_version");
    free(vil);
    free(ref);
}

/* ---- the restart record, and removing a folder's event files ---- */
static void test_restart_and_remove(const char *root) {
    char dir[4200], path[4600];
    snprintf(dir, sizeof dir, "%s/restart", root);
    VilTfEvents *w = vil_tfevents_open(dir, 1700000000.0);
    T_CHECK(w != NULL, "open %s", dir);
    if (!w) return;
    snprintf(path, sizeof path, "%s", vil_tfevents_path(w));
    T_CHECK(vil_tfevents_restart(w, 301, 1700000001.5) == 0 && vil_tfevents_restart(w, 0, 1700000002.0) == 0,
            "restart records at steps 301 and 0");
    VilErrCapture cap;
    vil_error_capture(&cap);
    T_CHECK(vil_tfevents_restart(w, 5, NAN) == VIL_EUSAGE && cap.count == 1, "a NaN wall time: VIL_EUSAGE (%s)",
            cap.msg);
    vil_error_release(&cap);
    T_CHECK(vil_tfevents_close(w) == 0, "close");
    size_t n;
    uint8_t *buf = slurp(path, &n);
    Rec recs[MAX_RECS];
    char why[128] = "";
    int k = buf ? read_records(buf, n, recs, why) : -1;
    Ev e;
    T_CHECK(k == 3 && decode_event(&recs[1], &e) == 0 && e.has_session && e.session_status == 1 &&
                e.has_step && e.step == 301 && e.wall == 1700000001.5 && !e.has_summary && !e.has_version,
            "the record reads as Event { wall_time, step 301, session_log { status START } } (%d records; %s)",
            k, why);
    /* as protobuf's serializer wrote Event(wall_time=1700000001.5, step=301,
     * session_log=SessionLog(status=START)) (tensorboard 2.21's event_pb2): wall_time (1,
     * fixed64), step (2, varint 301 = ad 02), session_log (7, 2 bytes: status (1) = 1); step 0
     * is left out */
    static const uint8_t want1[] = {0x09, 0, 0, 0x60, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x10, 0xad, 0x02,
                                    0x3a, 0x02, 0x08, 0x01};
    static const uint8_t want2[] = {0x09, 0, 0, 0x80, 0x40, 0xfc, 0x54, 0xd9, 0x41, 0x3a, 0x02, 0x08, 0x01};
    double w1 = 1700000001.5, w2 = 1700000002.0;
    T_CHECK(!memcmp(want1 + 1, &w1, 8) && !memcmp(want2 + 1, &w2, 8), "the expected wall-time bytes");
    T_CHECK(k == 3 && recs[1].len == sizeof want1 && same_bits(recs[1].data, want1, sizeof want1) &&
                recs[2].len == sizeof want2 && same_bits(recs[2].data, want2, sizeof want2),
            "the records byte for byte as protobuf writes them");
    free(buf);

    /* the folder's event files go; other files, other names and subfolders stay */
    VilTfEvents *w3 = vil_tfevents_open(dir, 1700000000.0); /* a second file (".1") */
    vil_tfevents_close(w3);
    char other[4600], sub[4600], subfile[4700], dirlike[4600];
    snprintf(other, sizeof other, "%s/metrics.jsonl", dir);
    snprintf(sub, sizeof sub, "%s/old", dir);
    snprintf(subfile, sizeof subfile, "%s/events.out.tfevents.1.h.2.vil", sub);
    snprintf(dirlike, sizeof dirlike, "%s/events.out.tfevents.folder", dir);
    FILE *f = fopen(other, "w");
    if (f) fclose(f);
    mkdir(sub, 0755);
    mkdir(dirlike, 0755);
    f = fopen(subfile, "w");
    if (f) fclose(f);
    int removed = vil_tfevents_remove_all(dir);
    T_CHECK(removed == 2 && access(path, F_OK) != 0 && access(other, F_OK) == 0 && access(subfile, F_OK) == 0 &&
                access(dirlike, F_OK) == 0,
            "remove_all: the 2 event files removed, metrics.jsonl, a subfolder's file and a folder so named "
            "kept (%d)", removed);
    T_CHECK(vil_tfevents_remove_all(dir) == 0, "again: none left");
    snprintf(other, sizeof other, "%s/absent", dir);
    T_CHECK(vil_tfevents_remove_all(other) == 0, "a folder that does not exist: 0");
}

/* ---- errors ---- */
static void test_errors(const char *root) {
    char dir[4200], file[4300], tag[VIL_TFEVENTS_TAG_MAX + 2];
    snprintf(dir, sizeof dir, "%s/errors", root);
    VilErrCapture cap;
    vil_error_capture(&cap);
    T_CHECK(vil_tfevents_open("", 1e9) == NULL && cap.count == 1, "empty folder name: NULL (%s)", cap.msg);
    T_CHECK(vil_tfevents_open(dir, NAN) == NULL && vil_tfevents_open(dir, -1) == NULL &&
                vil_tfevents_open(dir, INFINITY) == NULL && cap.count == 4,
            "bad wall time: NULL (%s)", cap.msg);
    snprintf(file, sizeof file, "%s/plainfile", root);
    FILE *f = fopen(file, "w");
    if (f) fclose(f);
    T_CHECK(vil_tfevents_open(file, 1e9) == NULL && cap.count == 5, "folder is a file: NULL (%s)", cap.msg);
    vil_error_release(&cap);

    VilTfEvents *w = vil_tfevents_open(dir, 1e9);
    T_CHECK(w != NULL, "open %s", dir);
    if (!w) return;
    vil_tfevents_flush(w);
    struct stat st0, st1;
    stat(vil_tfevents_path(w), &st0);
    vil_error_capture(&cap);
    T_CHECK(vil_tfevents_scalar(w, "", 1, 1e9, 1) == VIL_EUSAGE, "empty tag: VIL_EUSAGE");
    T_CHECK(vil_tfevents_scalar(w, NULL, 1, 1e9, 1) == VIL_EUSAGE, "NULL tag: VIL_EUSAGE");
    T_CHECK(vil_tfevents_scalar(w, "bad\xff", 1, 1e9, 1) == VIL_EUSAGE, "tag not UTF-8: VIL_EUSAGE");
    memset(tag, 'a', sizeof tag);
    tag[VIL_TFEVENTS_TAG_MAX + 1] = 0;
    T_CHECK(vil_tfevents_scalar(w, tag, 1, 1e9, 1) == VIL_EUSAGE, "tag of %d bytes: VIL_EUSAGE",
            VIL_TFEVENTS_TAG_MAX + 1);
    T_CHECK(vil_tfevents_scalar(w, "t", 1, NAN, 1) == VIL_EUSAGE &&
                vil_tfevents_scalar(w, "t", 1, -5, 1) == VIL_EUSAGE,
            "bad wall time: VIL_EUSAGE");
    T_CHECK(cap.count == 6, "each reported (%d: %s)", cap.count, cap.msg);
    vil_error_release(&cap);
    vil_tfevents_flush(w);
    stat(vil_tfevents_path(w), &st1);
    T_CHECK(st0.st_size == st1.st_size, "none of them wrote anything");

    tag[VIL_TFEVENTS_TAG_MAX] = 0; /* the longest tag fits the record buffer */
    T_CHECK(vil_tfevents_scalar(w, tag, INT64_MIN, 1e9, NAN) == 0, "tag of %d bytes, step INT64_MIN",
            VIL_TFEVENTS_TAG_MAX);
    char path[4600];
    snprintf(path, sizeof path, "%s", vil_tfevents_path(w));
    T_CHECK(vil_tfevents_close(w) == 0, "close");
    Rec recs[MAX_RECS];
    char why[128] = "";
    Ev e;
    size_t n;
    uint8_t *buf = slurp(path, &n);
    int k = buf ? read_records(buf, n, recs, why) : -1;
    T_CHECK(k == 2 && decode_event(&recs[1], &e) == 0 && strlen(e.tag) == VIL_TFEVENTS_TAG_MAX &&
                e.step == INT64_MIN && isnan(e.simple),
            "the long tag read back (%d records; %s)", k, why);
    free(buf);
}

/* A full disk, played by the file-size limit (write fails with EFBIG), in a child process so
 * the limit stays there. The child's exit code: 0, or the number of the first check failed. */
static void test_write_error(const char *root) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/full", root);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        VilTfEvents *w = vil_tfevents_open(dir, 1e9); /* the first record: 40 bytes */
        if (!w) _exit(1);
        struct rlimit lim = {300, 300};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(2);
        VilErrCapture cap;
        vil_error_capture(&cap);
        for (int i = 0; i < 20; i++) /* 20 x 33 bytes: stdio's buffer holds them */
            if (vil_tfevents_scalar(w, "train/loss", i + 1, 1e9, 1) != 0) _exit(3);
        if (cap.count != 0) _exit(4);
        if (vil_tfevents_flush(w) != -1 || cap.count != 1 || !strstr(cap.msg, "File too large")) _exit(5);
        if (vil_tfevents_scalar(w, "train/loss", 99, 1e9, 1) != -1) _exit(6); /* broken: no more */
        if (vil_tfevents_flush(w) != -1 || vil_tfevents_close(w) != -1) _exit(7);
        if (cap.count != 1) _exit(8); /* reported once */
        vil_error_release(&cap);
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
            "disk full: flush -1 once reported, then -1 (child exit %d)",
            WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

int main(void) {
    char *root = tmpdir();
    test_crc();
    test_roundtrip(root);
    test_reference(root);
    test_restart_and_remove(root);
    test_errors(root);
    test_write_error(root);
    rmtree(root);
    free(root);
    return t_finish();
}
