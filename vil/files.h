/* files.h: every file vil opens by a user's name and every file it writes (vil/files.c).
 * Reads go through vil_open_regular (a FIFO, folder or device refused by name, never waited
 * on). Writes never destroy what a path names: an output replaces only a regular file that is
 * not one of the command's inputs (by device and inode), never writes through a symbolic link,
 * and goes through a temporary file that is created exclusively under a name nobody can guess.
 * Included by vil/common.h. */
#ifndef VIL_FILES_H
#define VIL_FILES_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading ---- */
/* Open path for reading only when it is a regular file. The open itself uses O_NONBLOCK, so a
 * FIFO (or a device) returns at once instead of waiting for a writer; fstat then refuses
 * anything but a regular file and the descriptor goes back to blocking reads. Returns the
 * descriptor (O_CLOEXEC), or -1 with a vil_error naming the path (made printable) and what it
 * is ("'x' is a FIFO (named pipe), not a regular file"). Every reader of user-named files
 * opens through it (or the FILE form): a FIFO as an image, a checkpoint or a config would
 * otherwise hang vil. While inputs are tracked (vil_inputs_track) the file is one of them. */
int vil_open_regular(const char *path);
/* The same, its messages without the path ("a FIFO (named pipe), not a regular file"), for a
 * caller that names the file once itself. */
int vil_open_regular_unnamed(const char *path);
/* The same as a stdio stream (mode "r" or "rb"); NULL with a vil_error on failure. */
FILE *vil_fopen_regular(const char *path, const char *mode);
/* Read a whole regular file (vil_open_regular). Returns NULL and reports (with the path) on
 * failure. */
unsigned char *vil_read_file(const char *path, size_t *size_out);
/* The first n bytes of a regular file (fewer when it is shorter) into buf, to tell its format:
 * the count, or -1 when path is no readable regular file (not reported: the reader that opens it
 * next says why). Never waits on a FIFO. */
long vil_read_head(const char *path, void *buf, size_t n);
/* Create dir and its missing parents (mkdir -p). 0, or -1 with a vil_error message (also when
 * dir exists as something other than a folder). */
int vil_mkdir_p(const char *dir);

/* ---- inputs, which no output may replace ---- */
/* From now on (on = 1) every file this process opens through vil_open_regular is an input: an
 * output that is the same file (device and inode: a hard link or another spelling of the path
 * too) is refused by every writer below. The commands that write files a user names (classify
 * --csv, eval's results, avg --out, convert, compare, states, plot) turn it on first; training
 * does not (a resume reads the checkpoints it then writes again). Process-wide, thread-safe. */
void vil_inputs_track(int on);
/* path as an input now (a file the command names but has not opened yet, so that its outputs
 * can be checked before any work): 0, or -1 when it cannot be stat'ed (not reported: its
 * reader says why when it opens it). Folders and other non-regular files are not added. */
int vil_input_add(const char *path);

/* ---- writing ---- */
/* The checks every output gets, made before a command does its work so that a bad name costs
 * nothing: path not empty; when it exists, a regular file (not a symbolic link, FIFO, device or
 * folder) that is none of the inputs; and when exts is not NULL (".csv" or ".csv .jsonl": the
 * extensions this output may have), a name whose extension says another format that vil knows
 * (".safetensors", ".png", ".json", ...) is refused. `flag` names the output in messages
 * ("--csv"; NULL: the path alone). 0, or VIL_EUSAGE with the reason reported. */
int vil_output_check(const char *path, const char *exts, const char *flag);
/* Write atomically: a temporary .NAME.tmp.PID.RANDOM beside path (hidden, so that folder scans
 * skip what a killed writer leaves), created exclusively (O_EXCL, O_NOFOLLOW: a name planted
 * ahead fails the create and another is tried), written, fsync'ed and renamed over path, then
 * the folder fsync'ed. path gets vil_output_check's checks (without the extension) first and
 * again before the rename: VIL_EUSAGE when it names something vil must not replace, -1 when the
 * write fails (reported), 0 on success. */
int vil_write_file_atomic(const char *path, const void *data, size_t size);
/* The same without the fsyncs: for many small files that a rerun makes again (a converted
 * dataset); a crash of the machine can lose them, never leave one half-written. */
int vil_write_file_unsynced(const char *path, const void *data, size_t size);
/* Its two halves, for a writer that streams into the descriptor (libarchive's tar writer):
 * vil_temp_create checks path and creates its temporary (the descriptor, *tmp its malloc'd
 * name; VIL_EUSAGE or -1, reported); vil_temp_commit closes fd (fsync'ed first when sync),
 * checks path again and renames tmp over it (with sync, the folder fsync'ed too), frees tmp and
 * on any failure removes it: 0, VIL_EUSAGE or -1 (reported). */
int vil_temp_create(const char *path, char **tmp);
int vil_temp_commit(int fd, char *tmp, const char *path, int sync);
/* Open path for appending as a stdio stream (truncate: start it empty): created when missing
 * (mode 0644 less the umask), never through a symbolic link, and refused (NULL, reported) when
 * it is not a regular file, when it has another name (a hard link: appending would change that
 * file too) or when it is an input. For logs that grow line by line (metrics.jsonl). */
FILE *vil_fopen_append(const char *path, int truncate);
/* fd (opened from path for writing in place, as a lock file) checked: a regular file with no
 * other name (st_nlink 1). 0, or -1 with a vil_error naming path. */
int vil_check_own_file(int fd, const char *path);
/* Remove from dir the regular files that vil_write_file_atomic's temporaries are named
 * (.NAME.tmp.PID.RANDOM, or NAME.tmp.PID of older versions) whose process no longer exists
 * (kill(PID, 0) fails with ESRCH): what killed saves leave. Other files and live writers'
 * temporaries stay. The number removed, or -1 (reported) when dir cannot be listed. */
int vil_remove_stale_temps(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
