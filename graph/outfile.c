/*
 * outfile.c - output files that never destroy what their path names
 * (outfile.h): symbolic links followed, regular files replaced atomically
 * with their mode and owner kept, devices and FIFOs written in place.
 */
#include "graph/outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "graph/util.h"

/* ---- the temporaries a signal handler may have to remove -------------- */

#define MAX_LIVE 16
static _Atomic(char *) g_live[MAX_LIVE];

static void live_add(char *tmp) {
  for (int i = 0; i < MAX_LIVE; i++) {
    char *expect = NULL;
    if (atomic_compare_exchange_strong(&g_live[i], &expect, tmp))
      return;
  }
  /* more than MAX_LIVE at once: not removed by a signal, as before */
}

static void live_remove(const char *tmp) {
  for (int i = 0; i < MAX_LIVE; i++) {
    char *expect = (char *)tmp;
    if (atomic_compare_exchange_strong(&g_live[i], &expect, NULL))
      return;
  }
}

void gcc_outfile_cleanup_signal_safe(void) {
  for (int i = 0; i < MAX_LIVE; i++) {
    char *t = atomic_exchange(&g_live[i], NULL);
    if (t)
      unlink(t);
  }
}

/* ---- the files this run read (gcc_inputs_track) ------------------------ */

typedef struct noted_input {
  dev_t dev;
  ino_t ino;
  char *path;
} noted_input;

static atomic_int g_track;
static atomic_flag g_inputs_lock = ATOMIC_FLAG_INIT;
static noted_input *g_inputs;
static int g_n_inputs, g_cap_inputs;

static void inputs_lock(void) {
  while (atomic_flag_test_and_set_explicit(&g_inputs_lock, memory_order_acquire))
    ;
}

static void inputs_unlock(void) {
  atomic_flag_clear_explicit(&g_inputs_lock, memory_order_release);
}

void gcc_inputs_track(int on) {
  atomic_store(&g_track, on != 0);
  if (on)
    return;
  inputs_lock();
  for (int i = 0; i < g_n_inputs; i++)
    free(g_inputs[i].path);
  free(g_inputs);
  g_inputs = NULL;
  g_n_inputs = g_cap_inputs = 0;
  inputs_unlock();
}

void gcc_input_note(const char *path, int fd) {
  if (!atomic_load(&g_track) || !path)
    return;
  struct stat st;
  if ((fd >= 0 ? fstat(fd, &st) : stat(path, &st)) != 0 || !S_ISREG(st.st_mode))
    return; /* only regular files can be replaced by an output */
  inputs_lock();
  int known = 0;
  for (int i = 0; i < g_n_inputs && !known; i++)
    known = g_inputs[i].dev == st.st_dev && g_inputs[i].ino == st.st_ino;
  if (!known && g_n_inputs == g_cap_inputs) {
    int cap = g_cap_inputs ? 2 * g_cap_inputs : 16;
    noted_input *grown = realloc(g_inputs, (size_t)cap * sizeof *grown);
    if (grown) {
      g_inputs = grown;
      g_cap_inputs = cap;
    }
  }
  if (!known && g_n_inputs < g_cap_inputs) {
    char *copy = gcc_strdup(path);
    if (copy)
      g_inputs[g_n_inputs++] = (noted_input){st.st_dev, st.st_ino, copy};
  }
  inputs_unlock();
}

gcc_status gcc_outfiles_check_inputs(const gcc_named_path *outputs, int n_outputs, gcc_diag *d) {
  gcc_status s = GCC_OK;
  inputs_lock();
  for (int i = 0; i < n_outputs && s == GCC_OK; i++) {
    struct stat st;
    if (!outputs[i].path || stat(outputs[i].path, &st) != 0 || !S_ISREG(st.st_mode))
      continue;
    for (int j = 0; j < g_n_inputs; j++)
      if (g_inputs[j].dev == st.st_dev && g_inputs[j].ino == st.st_ino) {
        s = gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                         "%s %s would replace %s, which this run reads: an output never "
                         "overwrites an input",
                         outputs[i].flag, outputs[i].path, g_inputs[j].path);
        break;
      }
  }
  inputs_unlock();
  return s;
}

/* ---- paths ------------------------------------------------------------- */

/* `path` with every symbolic link of its last component followed (a
 * dangling link gives the path it points to); NULL with *err set on a loop,
 * an unreadable link or no memory. */
static char *resolve(const char *path, int *err) {
  char *cur = gcc_strdup(path);
  for (int hops = 0; cur && hops < 40; hops++) {
    struct stat st;
    if (lstat(cur, &st) != 0 || !S_ISLNK(st.st_mode))
      return cur;
    char buf[PATH_MAX];
    ssize_t n = readlink(cur, buf, sizeof buf - 1);
    if (n < 0) {
      *err = errno;
      free(cur);
      return NULL;
    }
    buf[n] = '\0';
    const char *slash = strrchr(cur, '/');
    char *next;
    if (buf[0] == '/' || !slash) {
      next = gcc_strdup(buf);
    } else { /* relative to the link's directory */
      size_t dl = (size_t)(slash - cur) + 1;
      next = malloc(dl + (size_t)n + 1);
      if (next) {
        memcpy(next, cur, dl);
        memcpy(next + dl, buf, (size_t)n + 1);
      }
    }
    free(cur);
    cur = next;
  }
  if (cur) {
    free(cur);
    *err = ELOOP;
  } else {
    *err = ENOMEM;
  }
  return NULL;
}

/* The directory part of `path` ("." if none), malloc'ed. */
static char *dir_of(const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    return gcc_strdup(".");
  if (slash == path)
    return gcc_strdup("/");
  char *r = malloc((size_t)(slash - path) + 1);
  if (r) {
    memcpy(r, path, (size_t)(slash - path));
    r[slash - path] = '\0';
  }
  return r;
}

/* Creates TARGET.tmp.PID.XXXXXX exclusively, mode 0666 less the umask. */
static int create_tmp(const char *target, char **tmp_out, int *err) {
  static atomic_uint counter;
  size_t n = strlen(target) + 48;
  char *tmp = malloc(n);
  if (!tmp) {
    *err = ENOMEM;
    return -1;
  }
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  for (int attempt = 0; attempt < 100; attempt++) {
    unsigned r = ((unsigned)ts.tv_nsec ^ (atomic_fetch_add(&counter, 1) * 2654435761u) ^
                  (unsigned)attempt * 40503u) &
                 0xffffffu;
    snprintf(tmp, n, "%s.tmp.%ld.%06x", target, (long)getpid(), r);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      *tmp_out = tmp;
      return fd;
    }
    if (errno != EEXIST) {
      *err = errno;
      free(tmp);
      return -1;
    }
  }
  *err = EEXIST;
  free(tmp);
  return -1;
}

static gcc_status io_error(gcc_diag *d, const char *what, const char *path, const char *target,
                           const char *doing, int err) {
  const char *sp = *what ? " " : "";
  char link[PATH_MAX + 32] = "";
  if (strcmp(path, target) != 0)
    snprintf(link, sizeof link, " (a link to %s)", target);
  if (err == EISDIR)
    return gcc_diag_set(d, GCC_ERR_IO, "%s%s%s%s: is a directory (it was not changed)", what, sp,
                        path, link);
  return gcc_diag_set(d, GCC_ERR_IO, "%s%s%s%s: %s: %s", what, sp, path, link, doing,
                      strerror(err));
}

/* ---- checking ------------------------------------------------------------ */

gcc_status gcc_outfile_check(const char *path, const char *what, gcc_diag *d) {
  what = what ? what : "";
  if (!path || !*path)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: the file name is empty", what);
  int err = 0;
  char *target = resolve(path, &err);
  if (!target)
    return io_error(d, what, path, path, "cannot follow the link", err);
  gcc_status s = GCC_OK;
  struct stat st;
  if (stat(target, &st) == 0) {
    if (S_ISDIR(st.st_mode))
      s = io_error(d, what, path, target, "cannot write", EISDIR);
    else if (!S_ISREG(st.st_mode) && access(target, W_OK) != 0)
      s = io_error(d, what, path, target, "cannot write", errno);
    if (s != GCC_OK || !S_ISREG(st.st_mode)) {
      free(target);
      return s;
    }
  } else if (errno != ENOENT) {
    s = io_error(d, what, path, target, "cannot write", errno);
    free(target);
    return s;
  }
  char *tmp = NULL;
  int fd = create_tmp(target, &tmp, &err);
  if (fd < 0) {
    char *dir = dir_of(target);
    char doing[PATH_MAX + 64];
    snprintf(doing, sizeof doing, "cannot create a file in %s", dir ? dir : "its directory");
    s = io_error(d, what, path, target, doing, err);
    free(dir);
  } else {
    close(fd);
    unlink(tmp);
    free(tmp);
  }
  free(target);
  return s;
}

/* ---- writing ------------------------------------------------------------- */

static void outfile_free(gcc_outfile *o) {
  free(o->what);
  free(o->target);
  free(o->tmp);
  memset(o, 0, sizeof *o);
}

gcc_status gcc_outfile_open(gcc_outfile *o, const char *path, const char *what, gcc_diag *d) {
  memset(o, 0, sizeof *o);
  what = what ? what : "";
  if (!path || !*path)
    return gcc_diag_set(d, GCC_ERR_IO, "%s: the file name is empty", what);
  int err = 0;
  o->what = malloc(strlen(what) + strlen(path) + 2);
  if (!o->what)
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  snprintf(o->what, strlen(what) + strlen(path) + 2, "%s%s%s", what, *what ? " " : "", path);
  o->target = resolve(path, &err);
  if (!o->target) {
    gcc_status s =
        gcc_diag_set(d, GCC_ERR_IO, "%s: cannot follow the link: %s", o->what, strerror(err));
    outfile_free(o);
    return s;
  }
  struct stat st;
  int fd = -1;
  if (stat(o->target, &st) == 0 && S_ISDIR(st.st_mode)) {
    err = EISDIR;
  } else if (stat(o->target, &st) == 0 && !S_ISREG(st.st_mode)) {
    /* a device or FIFO: written in place, never replaced */
    fd = open(o->target, O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
      err = errno;
  } else {
    if (stat(o->target, &st) == 0) { /* keep the old file's mode and owner */
      o->keep_mode = 1;
      o->mode = (unsigned)(st.st_mode & 07777);
      o->keep_owner = st.st_uid != geteuid() || st.st_gid != getegid();
      o->uid = (long)st.st_uid;
      o->gid = (long)st.st_gid;
    }
    fd = create_tmp(o->target, &o->tmp, &err);
    if (fd >= 0)
      live_add(o->tmp);
  }
  if (fd < 0) {
    gcc_status s = io_error(d, what, path, o->target,
                            err == EISDIR ? "cannot write" : "cannot create it", err);
    outfile_free(o);
    return s;
  }
  o->f = fdopen(fd, "wb");
  if (!o->f) {
    close(fd);
    gcc_outfile_abort(o);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory");
  }
  return GCC_OK;
}

void gcc_outfile_write(gcc_outfile *o, const void *bytes, size_t n) {
  if (o->err || n == 0)
    return;
  if (fwrite(bytes, 1, n, o->f) != n)
    o->err = errno ? errno : EIO;
}

void gcc_outfile_abort(gcc_outfile *o) {
  if (o->f)
    fclose(o->f);
  if (o->tmp) {
    unlink(o->tmp);
    live_remove(o->tmp);
  }
  outfile_free(o);
}

/* ---- staging (gcc_outfiles_stage_begin) ------------------------------- */

typedef struct staged_file {
  char *what, *tmp, *target;
} staged_file;

static int g_staging;
static staged_file *g_staged;
static int g_n_staged, g_cap_staged;

void gcc_outfiles_stage_begin(void) {
  g_staging = 1;
}

/* fsync of the directory of `target`: makes a rename durable */
static void sync_dir_of(const char *target) {
  char *dir = dir_of(target);
  int dfd = dir ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
  if (dfd >= 0) {
    (void)fsync(dfd);
    close(dfd);
  }
  free(dir);
}

gcc_status gcc_outfiles_stage_end(int commit, gcc_diag *d) {
  gcc_status s = GCC_OK;
  for (int i = 0; i < g_n_staged; i++) {
    staged_file *f = &g_staged[i];
    if (commit && s == GCC_OK) {
      if (rename(f->tmp, f->target) == 0) {
        sync_dir_of(f->target);
      } else {
        s = gcc_diag_set(d, GCC_ERR_IO, "%s: write failed: %s (the file was not changed)", f->what,
                         strerror(errno));
        unlink(f->tmp);
      }
    } else {
      unlink(f->tmp);
    }
    live_remove(f->tmp);
    free(f->what);
    free(f->tmp);
    free(f->target);
  }
  free(g_staged);
  g_staged = NULL;
  g_n_staged = g_cap_staged = 0;
  g_staging = 0;
  return s;
}

/* Keeps o's written, fsynced temporary for gcc_outfiles_stage_end. */
static int stage(gcc_outfile *o) {
  if (g_n_staged == g_cap_staged) {
    int cap = g_cap_staged ? 2 * g_cap_staged : 8;
    staged_file *grown = realloc(g_staged, (size_t)cap * sizeof *grown);
    if (!grown)
      return ENOMEM;
    g_staged = grown;
    g_cap_staged = cap;
  }
  g_staged[g_n_staged++] = (staged_file){o->what, o->tmp, o->target};
  memset(o, 0, sizeof *o); /* the names now belong to the stage */
  return 0;
}

gcc_status gcc_outfile_commit(gcc_outfile *o, gcc_diag *d) {
  int err = o->err;
  if (!err && fflush(o->f) != 0)
    err = errno ? errno : EIO;
  if (o->tmp) {
    int fd = fileno(o->f);
    if (!err && o->keep_owner && fchown(fd, (uid_t)o->uid, (gid_t)o->gid) != 0)
      (void)!fchown(fd, (uid_t)-1, (gid_t)o->gid); /* not ours to give: keep the group */
    if (!err && o->keep_mode && fchmod(fd, (mode_t)o->mode) != 0)
      err = errno;
    if (!err && fsync(fd) != 0)
      err = errno;
  }
  if (fclose(o->f) != 0 && !err)
    err = errno ? errno : EIO;
  o->f = NULL;
  if (o->tmp && !err && g_staging) { /* renamed by gcc_outfiles_stage_end */
    err = stage(o);
    if (!err)
      return GCC_OK;
  }
  if (o->tmp && !err && rename(o->tmp, o->target) != 0)
    err = errno;
  if (err) {
    gcc_status s = gcc_diag_set(d, GCC_ERR_IO, "%s: write failed: %s%s", o->what, strerror(err),
                                o->tmp ? " (the file was not changed)" : "");
    gcc_outfile_abort(o);
    return s;
  }
  if (o->tmp) {
    live_remove(o->tmp);
    sync_dir_of(o->target); /* make the rename durable */
  }
  outfile_free(o);
  return GCC_OK;
}

gcc_status gcc_outfile_write_all(const char *path, const char *what, const void *bytes, size_t size,
                                 gcc_diag *d) {
  gcc_outfile o;
  GCC_TRY(gcc_outfile_open(&o, path, what, d));
  gcc_outfile_write(&o, bytes, size);
  return gcc_outfile_commit(&o, d);
}

/* ---- identity and stale temporaries -------------------------------------- */

/* realpath of the directory + "/" + the last component, of the resolved
 * path; or the resolved path itself when its directory does not exist. */
static char *canonical(const char *path) {
  int err = 0;
  char *target = resolve(path, &err);
  if (!target)
    return NULL;
  char *dir = dir_of(target);
  const char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  char *real = dir ? realpath(dir, NULL) : NULL;
  char *r = NULL;
  if (real) {
    size_t n = strlen(real) + strlen(base) + 2;
    r = malloc(n);
    if (r)
      snprintf(r, n, "%s/%s", real, base);
  }
  free(real);
  free(dir);
  if (r) {
    free(target);
    return r;
  }
  return target;
}

int gcc_outfile_same(const char *a, const char *b) {
  struct stat sa, sb;
  int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
  if (ea && eb)
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  if (ea != eb)
    return 0;
  char *ca = canonical(a), *cb = canonical(b);
  int same = ca && cb && strcmp(ca, cb) == 0;
  free(ca);
  free(cb);
  return same;
}

int gcc_outfile_remove_stale(const char *path) {
  int err = 0, removed = 0;
  char *target = resolve(path, &err);
  if (!target)
    return 0;
  char *dir = dir_of(target);
  const char *slash = strrchr(target, '/');
  const char *base = slash ? slash + 1 : target;
  size_t bl = strlen(base);
  DIR *dh = dir ? opendir(dir) : NULL;
  struct dirent *e;
  while (dh && (e = readdir(dh)) != NULL) {
    const char *n = e->d_name;
    if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0)
      continue;
    char *end;
    errno = 0;
    long pid = strtol(n + bl + 5, &end, 10);
    if (errno || pid <= 0 || *end != '.' || strlen(end + 1) != 6 || pid == (long)getpid())
      continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
      continue; /* its process still runs (or is not ours to ask) */
    size_t m = strlen(dir) + strlen(n) + 2;
    char *full = malloc(m);
    if (full) {
      snprintf(full, m, "%s/%s", dir, n);
      removed += unlink(full) == 0;
      free(full);
    }
  }
  if (dh)
    closedir(dh);
  free(dir);
  free(target);
  return removed;
}

/* 1 if both name the same file and it is a regular one (or a new one) */
static int collide(const char *a, const char *b) {
  struct stat st;
  if (!gcc_outfile_same(a, b))
    return 0;
  return stat(a, &st) != 0 || S_ISREG(st.st_mode);
}

gcc_status gcc_outfiles_check(const gcc_named_path *outputs, int n_outputs,
                              const gcc_named_path *inputs, int n_inputs, gcc_diag *d) {
  for (int i = 0; i < n_outputs; i++) {
    const gcc_named_path *o = &outputs[i];
    if (!o->path)
      continue;
    for (int j = 0; j < n_inputs; j++)
      if (inputs[j].path && collide(o->path, inputs[j].path))
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s %s names %s (%s): an output never overwrites an input", o->flag,
                            o->path, inputs[j].flag, inputs[j].path);
    for (int j = 0; j < i; j++)
      if (outputs[j].path && collide(o->path, outputs[j].path))
        return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                            "%s %s and %s %s name the same file: give each output its own",
                            outputs[j].flag, outputs[j].path, o->flag, o->path);
  }
  for (int i = 0; i < n_outputs; i++) {
    if (!outputs[i].path)
      continue;
    GCC_TRY(gcc_outfile_check(outputs[i].path, outputs[i].flag, d));
    gcc_outfile_remove_stale(outputs[i].path);
  }
  return GCC_OK;
}
