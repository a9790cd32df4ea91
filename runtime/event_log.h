/*
 * event_log.h - training curves for TensorBoard (gcc-train --log-dir DIR):
 * an event file DIR/events.out.tfevents.<unix time>.<host>.<pid> in
 * TensorFlow's record format, and DIR/metrics.<unix time>.<host>.<pid>.csv
 * with the same scalars.
 *
 * Record format (TensorFlow's tensorflow/core/lib/io/record_writer.cc, what
 * TensorBoard and torch.utils.tensorboard read and write), little-endian:
 *   uint64 length
 *   uint32 masked CRC32C of the 8 length bytes
 *   byte   data[length]          a serialized tensorboard.Event
 *   uint32 masked CRC32C of data
 * where masked(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32). The
 * first record is an Event with file_version "brain.Event:2"; each scalar
 * is an Event {wall_time, step, summary {value {tag, simple_value}}}
 * (runtime/tensorboard.proto, a copy of TensorBoard's own).
 *
 * The CSV: a header "wall_time,step,tag,value", then one row per scalar.
 * Both files are appended to per scalar, each record or row whole (a write
 * cut short is taken back), so that TensorBoard shows a run while it trains
 * (they are logs, not outputs written once: graph/outfile.h's atomic
 * replace does not apply). Each run starts its own file set, as
 * TensorBoard's writers do: a run in a folder that already holds logs adds
 * a new event file (TensorBoard shows them as one run) and a new CSV, never
 * rows appended to another run's.
 */
#ifndef GCC_RUNTIME_EVENT_LOG_H
#define GCC_RUNTIME_EVENT_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "graph/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gcc_event_log gcc_event_log;

/* CRC32C (Castagnoli, the iSCSI polynomial), from ISA-L's crc32_iscsi. */
uint32_t gcc_crc32c(const void *data, size_t n);

/* The masked CRC32C of a TensorFlow record (see above). */
uint32_t gcc_crc32c_masked(const void *data, size_t n);

/* Makes `dir` if missing, creates the event file and the CSV named from
 * `wall_time` (seconds since the epoch), the host name and the process id,
 * and writes the file_version record and the CSV header; when that fails
 * neither file is left. Errors: GCC_ERR_IO naming the path. */
gcc_status gcc_event_log_open(const char *dir, double wall_time, gcc_event_log **out, gcc_diag *d);

/* Appends one scalar to both files and flushes them. `wall_time`: seconds
 * since the epoch. Errors: GCC_ERR_IO naming the file. */
gcc_status gcc_event_log_scalar(gcc_event_log *log, const char *tag, int64_t step, double wall_time,
                                float value, gcc_diag *d);

/* The event file's and the CSV's paths (valid until close). */
const char *gcc_event_log_path(const gcc_event_log *log);
const char *gcc_event_log_csv_path(const gcc_event_log *log);

/* Closes both files; NULL is fine. */
void gcc_event_log_close(gcc_event_log *log);

#ifdef __cplusplus
}
#endif

#endif /* GCC_RUNTIME_EVENT_LOG_H */
