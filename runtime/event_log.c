/*
 * event_log.c - TensorBoard event files and metrics CSVs (event_log.h).
 */
#include "runtime/event_log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <isa-l/crc.h>

#include "runtime/tensorboard.pb-c.h"

struct gcc_event_log {
  FILE *events, *csv;
  char path[4096], csv_path[4096];
};

uint32_t gcc_crc32c(const void *data, size_t n) {
  /* crc32_iscsi takes an int length and no final inversion: standard
   * CRC32C is ~crc32_iscsi(buf, len, ~0), chained over int-sized pieces */
  uint32_t c = 0xffffffffu;
  const unsigned char *p = data;
  while (n > 0) {
    int k = n > (1u << 30) ? (1 << 30) : (int)n;
    c = crc32_iscsi((unsigned char *)p, k, c);
    p += k;
    n -= (size_t)k;
  }
  return c ^ 0xffffffffu;
}

uint32_t gcc_crc32c_masked(const void *data, size_t n) {
  uint32_t c = gcc_crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void put_le32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (unsigned char)(v >> (8 * i));
}

/* Appends n bytes to `f` (unbuffered) as one whole record: a write that
 * fails part way (a full disk, a file-size limit) is cut back to where the
 * record began, so that a reader never meets half a record. */
static gcc_status append_whole(FILE *f, const char *path, const void *bytes, size_t n,
                               gcc_diag *d) {
  int fd = fileno(f);
  off_t start = lseek(fd, 0, SEEK_END);
  size_t done = 0;
  while (start >= 0 && done < n) {
    ssize_t w = write(fd, (const char *)bytes + done, n - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    done += (size_t)w;
  }
  if (start >= 0 && done == n)
    return GCC_OK;
  int err = start < 0 || !errno ? EIO : errno;
  if (start >= 0 && done > 0)
    (void)!ftruncate(fd, start);
  return gcc_diag_set(d, GCC_ERR_IO, "%s: cannot write: %s (the record was not kept)", path,
                      strerror(err));
}

/* One record: length, its masked CRC, the event, its masked CRC. */
static gcc_status write_event(gcc_event_log *log, const Tensorboard__Event *ev, gcc_diag *d) {
  size_t n = tensorboard__event__get_packed_size(ev);
  unsigned char *buf = malloc(12 + n + 4);
  if (!buf)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (event record)");
  uint64_t len = n;
  for (int i = 0; i < 8; i++)
    buf[i] = (unsigned char)(len >> (8 * i));
  put_le32(buf + 8, gcc_crc32c_masked(buf, 8));
  tensorboard__event__pack(ev, buf + 12);
  put_le32(buf + 12 + n, gcc_crc32c_masked(buf + 12, n));
  gcc_status s = append_whole(log->events, log->path, buf, 12 + n + 4, d);
  free(buf);
  return s;
}

gcc_status gcc_event_log_open(const char *dir, double wall_time, gcc_event_log **out, gcc_diag *d) {
  *out = NULL;
  if (mkdir(dir, 0777) != 0 && errno != EEXIST)
    return gcc_diag_set(d, GCC_ERR_IO, "--log-dir %s: cannot create it: %s", dir, strerror(errno));
  gcc_event_log *log = calloc(1, sizeof *log);
  if (!log)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (event log)");
  char host[256] = "localhost";
  if (gethostname(host, sizeof host - 1) != 0)
    snprintf(host, sizeof host, "localhost");
  host[sizeof host - 1] = '\0';
  for (char *h = host; *h; h++) /* a file name: no slashes */
    if (*h == '/')
      *h = '_';
  snprintf(log->path, sizeof log->path, "%s/events.out.tfevents.%010lld.%s.%ld", dir,
           (long long)wall_time, host, (long)getpid());
  /* one file set per run, as TensorBoard's writers do: the CSV is named as
   * the event file (a second run never appends rows with repeated steps) */
  snprintf(log->csv_path, sizeof log->csv_path, "%s/metrics.%010lld.%s.%ld.csv", dir,
           (long long)wall_time, host, (long)getpid());
  log->events = fopen(log->path, "wb");
  if (!log->events) {
    gcc_diag_set(d, GCC_ERR_IO, "%s: cannot create: %s", log->path, strerror(errno));
    gcc_event_log_close(log);
    return GCC_ERR_IO;
  }
  log->csv = fopen(log->csv_path, "w");
  static const char kHead[] = "wall_time,step,tag,value\n";
  if (!log->csv) {
    gcc_diag_set(d, GCC_ERR_IO, "%s: cannot write: %s", log->csv_path, strerror(errno));
    unlink(log->path); /* no empty event file of a run that wrote nothing */
    gcc_event_log_close(log);
    return GCC_ERR_IO;
  }
  if (lseek(fileno(log->csv), 0, SEEK_END) == 0 &&
      append_whole(log->csv, log->csv_path, kHead, sizeof kHead - 1, d) != GCC_OK) {
    unlink(log->path);
    unlink(log->csv_path); /* empty: its header was not written */
    gcc_event_log_close(log);
    return GCC_ERR_IO;
  }
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.has_wall_time = wall_time != 0; /* proto3 upstream: zero fields are not written */
  ev.wall_time = wall_time;
  ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
  ev.file_version = "brain.Event:2";
  gcc_status s = write_event(log, &ev, d);
  if (s != GCC_OK) {
    unlink(log->path); /* not even its first record: no 0-byte event file */
    gcc_event_log_close(log);
    return s;
  }
  *out = log;
  return GCC_OK;
}

gcc_status gcc_event_log_scalar(gcc_event_log *log, const char *tag, int64_t step, double wall_time,
                                float value, gcc_diag *d) {
  Tensorboard__Summary__Value v = TENSORBOARD__SUMMARY__VALUE__INIT;
  v.tag = (char *)tag;
  v.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
  v.simple_value = value;
  Tensorboard__Summary__Value *vs[1] = {&v};
  Tensorboard__Summary sum = TENSORBOARD__SUMMARY__INIT;
  sum.n_value = 1;
  sum.value = vs;
  Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
  ev.has_wall_time = wall_time != 0;
  ev.wall_time = wall_time;
  ev.has_step = step != 0;
  ev.step = step;
  ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
  ev.summary = &sum;
  GCC_TRY(write_event(log, &ev, d));
  /* %.9g: a float32 round-trips; one whole row or none */
  char row[512];
  int len = snprintf(row, sizeof row, "%.6f,%lld,%s,%.9g\n", wall_time, (long long)step, tag,
                     (double)value);
  if (len < 0 || (size_t)len >= sizeof row)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "%s: tag '%s' is too long", log->csv_path,
                        tag);
  return append_whole(log->csv, log->csv_path, row, (size_t)len, d);
}

const char *gcc_event_log_path(const gcc_event_log *log) {
  return log->path;
}

const char *gcc_event_log_csv_path(const gcc_event_log *log) {
  return log->csv_path;
}

void gcc_event_log_close(gcc_event_log *log) {
  if (!log)
    return;
  if (log->events)
    fclose(log->events);
  if (log->csv)
    fclose(log->csv);
  free(log);
}
