/* tfevents.h: a writer of TensorBoard event files (events.out.tfevents.*) holding scalar
 * summaries, so that TensorBoard shows a run's loss, learning rate and accuracy.
 *
 * The file is a sequence of TFRecords (tensorflow/core/lib/io/record_writer.cc): a uint64
 * little-endian length, the masked CRC32C of those 8 bytes (uint32 LE), the data, the masked
 * CRC32C of the data (uint32 LE). Each record's data is a serialized tensorboard.Event
 * (event.proto): wall_time (field 1, double), step (2, int64), file_version (3), summary (5),
 * a Summary of one Value (summary.proto: tag = 1, simple_value = 2, a float), or session_log
 * (7, a SessionLog: status = 1, an enum; START is 1). The first record
 * holds only wall_time and file_version "brain.Event:2". Fields are written as protobuf's own
 * serializer writes them (field order, proto3 defaults left out), so a scalar record is
 * byte-identical to the one TensorBoard's EventFileWriter writes for the same Event; the test
 * checks that against a file TensorBoard wrote (tests/data/tfevents/).
 *
 * A writer is not thread-safe: one thread (rank 0's training loop) uses it. */
#ifndef VIL_TFEVENTS_H
#define VIL_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The longest tag accepted, in bytes. */
#define VIL_TFEVENTS_TAG_MAX 1024

typedef struct VilTfEvents VilTfEvents;

/* Creates dir (and its parents) when missing, then the file
 * dir/events.out.tfevents.<seconds>.<hostname>.<pid>.vil, where <seconds> is wall_time's whole
 * seconds, padded to 10 digits as TensorBoard's writer does, and writes the file_version record
 * (flushed, so TensorBoard sees a valid file at once). An existing file is never overwritten:
 * a second writer of the same process in the same second gets the name with ".1", ".2", ...
 * appended, which sorts after the first (TensorBoard reads a folder's files in name order).
 * wall_time: seconds since the epoch (e.g. from clock_gettime(CLOCK_REALTIME)). Returns NULL
 * with a vil_error message when dir is empty, wall_time is not in [0, 1e11) (a time since the
 * epoch, before the year 5138), or the folder or file cannot be created or written. */
VilTfEvents *vil_tfevents_open(const char *dir, double wall_time);

/* Appends one scalar summary: tag (UTF-8, 1 to VIL_TFEVENTS_TAG_MAX bytes, e.g. "train/loss"),
 * step (the x axis; 0 and negative steps are fine), wall_time (seconds since the epoch), value
 * (NaN and infinities are stored as they are; TensorBoard shows them). The record goes to
 * stdio's buffer: vil_tfevents_flush puts it on disk. Returns 0; VIL_EUSAGE with a vil_error
 * message for a bad tag or a wall_time that is not finite and >= 0 (nothing written); -1 with a
 * vil_error message when writing fails (disk full). After a write error the writer is broken:
 * later calls write nothing and return -1 without another message, so that no record lands
 * after a partial one. */
int vil_tfevents_scalar(VilTfEvents *w, const char *tag, int64_t step, double wall_time,
                        float value);

/* Appends the record TensorBoard reads as a restart of the run at `step`: an Event of wall_time,
 * step and session_log { status: START } (event.proto field 7; PyTorch's
 * SummaryWriter(purge_step=step) writes the same). TensorBoard's Python loaders (`--load_fast
 * false`, EventAccumulator) drop the events of step >= step read before it, from every START
 * after a run's first; its Rust loader ignores the record and drops a tag's points of step >= s
 * when that tag's point of step s arrives. 0, VIL_EUSAGE (a bad wall_time, nothing written) or
 * -1, as vil_tfevents_scalar. */
int vil_tfevents_restart(VilTfEvents *w, int64_t step, double wall_time);

/* Removes the event files (events.out.tfevents.*, regular files; subfolders are not looked in)
 * of dir. The number removed (0 when dir does not exist), or -1 with a vil_error message naming
 * a file that could not be removed. */
int vil_tfevents_remove_all(const char *dir);

/* Puts the records written so far into the file (fflush, no fsync: TensorBoard polls the growing
 * file). 0, or -1 with a vil_error message (or -1 alone when the writer was already broken). */
int vil_tfevents_flush(VilTfEvents *w);

/* Flushes, closes the file and frees w (also when the flush fails). NULL is a no-op returning
 * 0. Returns 0, or -1 with a vil_error message when the last records could not be written (or
 * -1 alone when the writer was already broken). */
int vil_tfevents_close(VilTfEvents *w);

/* The file's path, owned by w. */
const char *vil_tfevents_path(const VilTfEvents *w);

/* CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord uses. crc = 0
 * starts; the result of one call continues in the next (crc32c(crc32c(0, a), b) is the CRC of
 * a followed by b). Thread-safe. */
uint32_t vil_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC32C of data[0..n): ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t vil_crc32c_masked(const void *data, size_t n);

#ifdef __cplusplus
}
#endif
#endif
