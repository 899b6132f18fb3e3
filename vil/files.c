/* files.c: opening the files users name, the inputs no output may replace, and the one way vil
 * writes a file (files.h). Round four of the hostile-input probes found that outputs renamed
 * over whatever the path named (a FIFO, /dev/null, a symlink, the command's own input) and that
 * the temporary name was predictable; everything here exists so that a write never destroys
 * what a path names. */
#define _GNU_SOURCE
#include "vil/files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "vil/common.h"

/* ---- reading ---- */

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* the open of both forms; shown: the path as messages give it, NULL to leave it out */

/* inputs: below */
static int inputs_tracked(void);
static void input_insert(const struct stat *st, const char *path);

static int open_regular(const char *path, const char *shown) {
    /* "cannot open 'NAME': reason", or "cannot open: reason" */
    const char *pre = shown ? " '" : "", *mid = shown ? "'" : "", *name = shown ? shown : "";
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        vil_error("cannot open%s%s%s: %s", pre, name, mid, vil_errno_str());
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        vil_error("cannot stat%s%s%s: %s", pre, name, mid, vil_errno_str());
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        if (shown) vil_error("'%s' is %s, not a regular file", shown, file_kind(st.st_mode));
        else vil_error("%s, not a regular file", file_kind(st.st_mode));
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        vil_error("%s%s%s%s", shown ? "'" : "", name, shown ? "': " : "", vil_errno_str());
        close(fd);
        return -1;
    }
    if (inputs_tracked()) input_insert(&st, path);
    return fd;
}

int vil_open_regular(const char *path) {
    char shown[1024];
    return open_regular(path, vil_printable(shown, sizeof shown, path));
}

int vil_open_regular_unnamed(const char *path) { return open_regular(path, NULL); }

FILE *vil_fopen_regular(const char *path, const char *mode) {
    int fd = vil_open_regular(path);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, mode);
    if (!f) {
        vil_error("cannot open '%s': %s", path, vil_errno_str());
        close(fd);
    }
    return f;
}

unsigned char *vil_read_file(const char *path, size_t *size_out) {
    int fd = vil_open_regular(path);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        vil_error("cannot stat '%s': %s", path, vil_errno_str());
        close(fd);
        return NULL;
    }
    size_t n = (size_t)st.st_size, got = 0;
    unsigned char *buf = vil_try_malloc(n + 1); /* the file's size */
    if (!buf) {
        vil_error("cannot read '%s': no memory for its %zu bytes", path, n);
        close(fd);
        return NULL;
    }
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    if (got != n) {
        vil_error("cannot read '%s': read %zu of %zu bytes", path, got, n);
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *size_out = n;
    return buf;
}

long vil_read_head(const char *path, void *buf, size_t n) {
    VilErrCapture cap;
    vil_error_capture(&cap);
    int fd = vil_open_regular(path);
    vil_error_release(&cap);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    close(fd);
    return (long)got;
}

int vil_mkdir_p(const char *dir) {
    char *p = vil_strdup(dir);
    for (char *s = p + 1;; s++) {
        if (*s == '/' || *s == 0) {
            char c = *s;
            *s = 0;
            if (mkdir(p, 0755) != 0 && errno != EEXIST) {
                vil_error("cannot create the folder '%s': %s", p, vil_errno_str());
                free(p);
                return -1;
            }
            *s = c;
            if (!c) break;
        }
    }
    free(p);
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        vil_error("'%s' exists and is not a folder", dir);
        return -1;
    }
    return 0;
}

/* ---- inputs ---- */

/* A set of (device, inode) with the path each was first opened by, for the message. Open
 * addressing; the table only grows (a command's inputs live as long as it does). */
typedef struct {
    dev_t dev;
    ino_t ino;
    char *path; /* NULL: an empty slot */
} InputEntry;

static struct {
    pthread_mutex_t lock;
    int on;
    InputEntry *slot;
    size_t cap, n; /* cap a power of two, or 0 */
} g_inputs = {PTHREAD_MUTEX_INITIALIZER, 0, NULL, 0, 0};

static size_t input_hash(dev_t dev, ino_t ino) {
    return (size_t)vil_hash_seed((uint64_t)dev, (uint64_t)ino, 0, 0);
}

/* the entry of (dev, ino), or the empty slot where it would go; the lock held, cap > 0 */
static InputEntry *input_slot(dev_t dev, ino_t ino) {
    size_t mask = g_inputs.cap - 1;
    for (size_t i = input_hash(dev, ino) & mask;; i = (i + 1) & mask) {
        InputEntry *e = &g_inputs.slot[i];
        if (!e->path || (e->dev == dev && e->ino == ino)) return e;
    }
}

static void input_insert(const struct stat *st, const char *path) {
    pthread_mutex_lock(&g_inputs.lock);
    if (2 * (g_inputs.n + 1) > g_inputs.cap) { /* keep the load at most 1/2 */
        InputEntry *old = g_inputs.slot;
        size_t old_cap = g_inputs.cap;
        g_inputs.cap = old_cap ? 2 * old_cap : 64;
        g_inputs.slot = vil_calloc(g_inputs.cap, sizeof *g_inputs.slot);
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].path) *input_slot(old[i].dev, old[i].ino) = old[i];
        free(old);
    }
    InputEntry *e = input_slot(st->st_dev, st->st_ino);
    if (!e->path) {
        e->dev = st->st_dev, e->ino = st->st_ino, e->path = vil_strdup(path);
        g_inputs.n++;
    }
    pthread_mutex_unlock(&g_inputs.lock);
}

/* the path an input with st's device and inode was named by, copied into buf; NULL: none */
static const char *input_named(const struct stat *st, char *buf, size_t cap) {
    const char *found = NULL;
    pthread_mutex_lock(&g_inputs.lock);
    if (g_inputs.cap) {
        InputEntry *e = input_slot(st->st_dev, st->st_ino);
        if (e->path) found = vil_printable(buf, cap, e->path);
    }
    pthread_mutex_unlock(&g_inputs.lock);
    return found;
}

void vil_inputs_track(int on) {
    pthread_mutex_lock(&g_inputs.lock);
    g_inputs.on = on;
    pthread_mutex_unlock(&g_inputs.lock);
}

static int inputs_tracked(void) {
    pthread_mutex_lock(&g_inputs.lock);
    int on = g_inputs.on;
    pthread_mutex_unlock(&g_inputs.lock);
    return on;
}

int vil_input_add(const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0) return -1;
    if (S_ISREG(st.st_mode)) input_insert(&st, path);
    return 0;
}

/* ---- outputs ---- */

/* Extensions whose format vil can name: an output called x.safetensors that is not a
 * checkpoint would replace what the name promises (or the command's model). Names with an
 * extension not listed (or none) are taken as given. */
static const struct {
    const char *ext, *what;
} known_ext[] = {
    {".safetensors", "a safetensors checkpoint"}, {".pth", "a PyTorch checkpoint"},
    {".pt", "a PyTorch checkpoint"}, {".ckpt", "a checkpoint"}, {".onnx", "an ONNX model"},
    {".csv", "CSV"}, {".tsv", "tab-separated text"}, {".json", "JSON"}, {".jsonl", "JSON lines"},
    {".cfg", "a vil config"}, {".svg", "an SVG image"}, {".png", "a PNG image"},
    {".jpg", "a JPEG image"}, {".jpeg", "a JPEG image"}, {".gif", "a GIF image"},
    {".bmp", "a BMP image"}, {".ppm", "a PPM image"}, {".pgm", "a PGM image"},
    {".pnm", "a PNM image"}, {".webp", "a WebP image"}, {".tif", "a TIFF image"},
    {".tiff", "a TIFF image"}, {".tar", "a tar archive"}, {".gz", "a gzip file"},
    {".tgz", "a gzip'd tar archive"}, {".zip", "a zip archive"}, {".npy", "a NumPy array"},
    {".npz", "NumPy arrays"}, {".c", "C source"}, {".h", "a C header"}, {".py", "Python source"},
    {".sh", "a shell script"}, {".md", "Markdown"},
};

/* the extension of path's last component ("" when none), e.g. ".csv" */
static const char *path_ext(const char *path) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    return dot && dot != base ? dot : "";
}

/* ext among the space-separated exts (case-insensitive) */
static int ext_listed(const char *ext, const char *exts) {
    size_t n = strlen(ext);
    for (const char *p = exts; *p;) {
        size_t k = strcspn(p, " ");
        if (k == n && strncasecmp(p, ext, n) == 0) return 1;
        p += k;
        p += strspn(p, " ");
    }
    return 0;
}

/* What every write checks: path not empty, and when it exists a regular file that no input
 * is. "FLAG 'PATH'" or "'PATH'" starts each message. 0 or VIL_EUSAGE (reported). */
static int output_ok(const char *path, const char *flag) {
    char shown[1024], in[1024];
    const char *pre = flag ? flag : "", *sp = flag ? " " : "";
    if (!path || !*path) {
        vil_error("%s%san empty file name: name the file to write", pre, sp);
        return VIL_EUSAGE;
    }
    vil_printable(shown, sizeof shown, path);
    struct stat st;
    if (lstat(path, &st) != 0) return 0; /* nothing there (or unreachable: the write says why) */
    if (S_ISLNK(st.st_mode)) {
        vil_error("%s%s'%s' is a symbolic link: vil neither writes through a link nor replaces "
                  "one; name the file itself, or remove the link", pre, sp, shown);
        return VIL_EUSAGE;
    }
    if (!S_ISREG(st.st_mode)) {
        vil_error("%s%s'%s' exists and is %s: vil writes regular files and replaces nothing "
                  "else; choose another name", pre, sp, shown, file_kind(st.st_mode));
        return VIL_EUSAGE;
    }
    if (input_named(&st, in, sizeof in)) {
        if (strcmp(in, shown) == 0)
            vil_error("%s%s'%s' is one of this command's inputs: writing it would destroy it; "
                      "choose another name", pre, sp, shown);
        else
            vil_error("%s%s'%s' is the same file as the input '%s': writing it would destroy "
                      "it; choose another name", pre, sp, shown, in);
        return VIL_EUSAGE;
    }
    return 0;
}

int vil_output_check(const char *path, const char *exts, const char *flag) {
    int rc = output_ok(path, flag);
    if (rc || !exts) return rc;
    const char *ext = path_ext(path);
    if (!*ext || ext_listed(ext, exts)) return 0;
    for (size_t i = 0; i < sizeof known_ext / sizeof known_ext[0]; i++) {
        if (strcasecmp(ext, known_ext[i].ext) != 0) continue;
        char shown[1024];
        vil_error("%s%s'%s': the name says %s, which this output is not; choose a name ending "
                  "in %s", flag ? flag : "", flag ? " " : "", vil_printable(shown, sizeof shown, path),
                  known_ext[i].what, exts);
        return VIL_EUSAGE;
    }
    return 0;
}

int vil_temp_create(const char *path, char **tmp) {
    static const char digits[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    int rc = output_ok(path, NULL);
    *tmp = NULL;
    if (rc) return rc;
    /* hidden (".NAME"): a folder scan (classify, datasets) skips what a killed writer left */
    const char *slash = strrchr(path, '/');
    size_t dir = slash ? (size_t)(slash - path) + 1 : 0, cap = strlen(path) + 48;
    *tmp = vil_malloc(cap);
    for (int attempt = 0; attempt < 64; attempt++) {
        unsigned char r[12];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* no entropy source: the clock */
            uint64_t a = vil_hash_seed((uint64_t)getpid(), (uint64_t)(vil_now() * 1e9), attempt, 0);
            uint64_t b = vil_hash_seed(a, (uint64_t)(uintptr_t)tmp, attempt, 1);
            memcpy(r, &a, 8);
            memcpy(r + 8, &b, 4);
        }
        char rnd[sizeof r + 1];
        for (size_t i = 0; i < sizeof r; i++) rnd[i] = digits[r[i] % 36];
        rnd[sizeof r] = 0;
        snprintf(*tmp, cap, "%.*s.%s.tmp.%ld.%s", (int)dir, path, path + dir, (long)getpid(), rnd);
        int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) return fd;
        if (errno != EEXIST) break;
    }
    int e = errno;
    /* the folder said by name: the temporary's name would only puzzle */
    char *dcopy = vil_strdup(path), shown[1024], dshown[1024];
    const char *folder = dirname(dcopy);
    vil_printable(shown, sizeof shown, path), vil_printable(dshown, sizeof dshown, folder);
    if (e == ENOENT)
        vil_error("cannot write '%s': the folder '%s' does not exist (create it first)", shown, dshown);
    else if (e == ENOTDIR)
        vil_error("cannot write '%s': '%s' is not a folder", shown, dshown);
    else
        vil_error("cannot write '%s': cannot create a file in '%s': %s", shown, dshown, strerror(e));
    free(dcopy);
    free(*tmp);
    *tmp = NULL;
    return -1;
}

int vil_temp_commit(int fd, char *tmp, const char *path, int sync) {
    int rc = 0;
    if ((sync && fsync(fd) != 0) || close(fd) != 0) {
        vil_error("cannot flush '%s': %s", tmp, vil_errno_str());
        rc = -1;
    }
    /* checked again right before the rename: what the path names may have changed while the
     * data was written (a rename replaces a name, never writes through it, so what could still
     * change after this is the name alone, not a file's contents) */
    if (rc == 0) rc = output_ok(path, NULL);
    if (rc == 0 && rename(tmp, path) != 0) {
        vil_error("cannot rename '%s' to '%s': %s", tmp, path, vil_errno_str());
        rc = -1;
    }
    if (rc != 0) unlink(tmp);
    else if (sync) { /* fsync the directory so the rename itself survives a crash */
        char *dcopy = vil_strdup(path);
        int dfd = open(dirname(dcopy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dcopy);
    }
    free(tmp);
    return rc;
}

static int write_replacing(const char *path, const void *data, size_t size, int sync) {
    char *tmp;
    int fd = vil_temp_create(path, &tmp);
    if (fd < 0) return fd;
    const unsigned char *p = data;
    size_t left = size;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            vil_error("cannot write '%s': %s (disk full?)", tmp, vil_errno_str());
            close(fd);
            unlink(tmp);
            free(tmp);
            return -1;
        }
        p += w;
        left -= (size_t)w;
    }
    return vil_temp_commit(fd, tmp, path, sync);
}

int vil_write_file_atomic(const char *path, const void *data, size_t size) {
    return write_replacing(path, data, size, 1);
}

int vil_write_file_unsynced(const char *path, const void *data, size_t size) {
    return write_replacing(path, data, size, 0);
}

int vil_check_own_file(int fd, const char *path) {
    char shown[1024];
    struct stat st;
    if (fstat(fd, &st) != 0) {
        vil_error("cannot stat '%s': %s", vil_printable(shown, sizeof shown, path), vil_errno_str());
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        vil_error("'%s' is %s, not a regular file: remove it", vil_printable(shown, sizeof shown, path),
                  file_kind(st.st_mode));
        return -1;
    }
    if (st.st_nlink != 1) {
        vil_error("'%s' has %lu names (hard links): writing it would change the other file too; "
                  "remove it (vil creates its own)", vil_printable(shown, sizeof shown, path),
                  (unsigned long)st.st_nlink);
        return -1;
    }
    return 0;
}

FILE *vil_fopen_append(const char *path, int truncate) {
    if (output_ok(path, NULL) != 0) return NULL;
    char shown[1024];
    vil_printable(shown, sizeof shown, path);
    /* O_NONBLOCK: a FIFO put there since the check fails the open or shows in fstat, instead
     * of waiting for a reader */
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0) {
        vil_error("cannot write '%s': %s", shown, errno == ELOOP ? "it is a symbolic link" : vil_errno_str());
        return NULL;
    }
    struct stat st;
    char in[1024];
    int fl = fcntl(fd, F_GETFL);
    if (vil_check_own_file(fd, path) != 0) goto fail;
    if (fstat(fd, &st) == 0 && input_named(&st, in, sizeof in)) {
        vil_error("'%s' is the same file as the input '%s': writing it would change it", shown, in);
        goto fail;
    }
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0 || (truncate && ftruncate(fd, 0) != 0)) {
        vil_error("cannot write '%s': %s", shown, vil_errno_str());
        goto fail;
    }
    FILE *f = fdopen(fd, "a");
    if (!f) {
        vil_error("cannot write '%s': %s", shown, vil_errno_str());
        goto fail;
    }
    return f;
fail:
    close(fd);
    return NULL;
}

/* ---- temporary files of killed writers ---- */

/* The pid of a vil_write_file_atomic temporary name, or 0 when the name is not one:
 * ".NAME.tmp.PID.RANDOM" (RANDOM 12 of [a-z0-9]) or, from versions before the random part,
 * "NAME.tmp.PID"; NAME not empty, PID digits without a leading zero. */
static long temp_owner(const char *name) {
    const char *tag = NULL;
    for (const char *s = strstr(name, ".tmp."); s; s = strstr(s + 1, ".tmp.")) tag = s;
    if (!tag || tag == name) return 0;
    const char *d = tag + 5;
    size_t digits = strspn(d, "0123456789");
    if (*d < '1' || *d > '9' || digits > 9) return 0; /* Linux pids stay below 2^22 */
    const char *rest = d + digits;
    if (*rest && !(rest[0] == '.' && strlen(rest + 1) == 12 &&
                   strspn(rest + 1, "abcdefghijklmnopqrstuvwxyz0123456789") == 12))
        return 0;
    return strtol(d, NULL, 10);
}

int vil_remove_stale_temps(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        vil_error("cannot list the folder '%s': %s", dir, strerror(errno));
        return -1;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long pid = temp_owner(e->d_name);
        if (pid <= 0) continue;
        /* EPERM means the process exists (someone else's): only ESRCH proves the writer gone.
         * A writer on another host sharing the folder looks dead here: a folder shared that
         * way is not a layout vil supports (two runs would also write the same files). */
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) != 0) {
            vil_warn("cannot remove the stale temporary file '%s/%s': %s", dir, e->d_name,
                     strerror(errno));
            continue;
        }
        removed++;
    }
    closedir(d);
    return removed;
}
