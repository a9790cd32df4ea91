/*
 * cpu_choice.c - the CPU GEMM library chosen by measurement, with a memo per
 * process and a cache on disk (cpu_choice.h).
 */
#include "runtime/cpu/cpu_choice.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/util.h"
#include "runtime/cpu/dnnl_ops.h"

#define MAX_KEY     1000
#define MAX_ENTRY   4096
#define ENTRY_MAGIC "gcc-train cpu choice 1"

static const char *const kNames[GCC_CPU_LIB_COUNT] = {"onednn", "openblas", "gemv"};

const char *gcc_cpu_lib_name(int lib) {
  return lib >= 0 && lib < GCC_CPU_LIB_COUNT ? kNames[lib] : NULL;
}

static int lib_of(const char *s, size_t n) {
  for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
    if (strlen(kNames[i]) == n && strncmp(s, kNames[i], n) == 0)
      return i;
  return -1;
}

gcc_status gcc_cpu_lib_forced(const char *var, int *lib, gcc_diag *d) {
  *lib = -1;
  const char *v = getenv(var);
  if (!v || !*v || strcmp(v, "auto") == 0)
    return GCC_OK;
  *lib = lib_of(v, strlen(v));
  if (*lib < 0)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "%s=%s: expected auto, onednn, openblas or gemv", var, v);
  return GCC_OK;
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the machine ----------------------------------------------------------- */

static pthread_once_t g_model_once = PTHREAD_ONCE_INIT;
static char g_model[128] = "unknown";

/* The CPU's brand string: CPUID leaves 0x80000002-4 on x86 (reading
 * /proc/cpuinfo costs 10 ms and more on some kernels: it samples every
 * core's clock), else /proc/cpuinfo's "model name". */
static void read_model(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned r[12];
  /* unsigned in GCC's cpuid.h, int in clang's (the fuzz builds) */
  if ((unsigned)__get_cpuid_max(0x80000000u, NULL) >= 0x80000004u) {
    for (unsigned i = 0; i < 3; i++)
      __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
    char brand[49];
    memcpy(brand, r, 48);
    brand[48] = '\0';
    const char *b = brand;
    while (*b == ' ')
      b++;
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == ' ')
      n--;
    if (n > 0) {
      memcpy(g_model, b, n < sizeof g_model ? n : sizeof g_model - 1);
      g_model[n < sizeof g_model ? n : sizeof g_model - 1] = '\0';
      return;
    }
  }
#endif
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    if (strncmp(line, "model name", 10) != 0)
      continue;
    const char *p = strchr(line, ':');
    if (!p)
      break;
    p++;
    while (*p == ' ' || *p == '\t')
      p++;
    size_t n = strcspn(p, "\n");
    if (n >= sizeof g_model)
      n = sizeof g_model - 1;
    memcpy(g_model, p, n);
    g_model[n] = '\0';
    break;
  }
  fclose(f);
}

void gcc_cpu_choice_machine(int threads, char *buf, size_t size) {
  pthread_once(&g_model_once, read_model);
  const char *wp = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
  char wait[48];
  if (wp && strcasecmp(wp, "passive") == 0)
    snprintf(wait, sizeof wait, "passive");
  else if (spin && *spin && !wp)
    snprintf(wait, sizeof wait, "spin%.32s", spin);
  else
    snprintf(wait, sizeof wait, "active");
  snprintf(buf, size, "cpu=%s isa=%s onednn=%s threads=%d wait=%s", g_model, gcc_dnnl_isa(),
           gcc_dnnl_version(), threads, wait);
}

/* ---- the memo ---------------------------------------------------------------- */

typedef struct memo_entry {
  char *key;
  int lib;
} memo_entry;

static pthread_mutex_t g_memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo_entry *g_memo;
static size_t g_memo_n, g_memo_cap;

static int memo_get(const char *key) {
  int lib = -1;
  pthread_mutex_lock(&g_memo_mu);
  for (size_t i = 0; i < g_memo_n; i++)
    if (strcmp(g_memo[i].key, key) == 0) {
      lib = g_memo[i].lib;
      break;
    }
  pthread_mutex_unlock(&g_memo_mu);
  return lib;
}

/* Keeps the first choice of a key (another thread may have chosen it
 * meanwhile); returns the library the memo holds. Out of memory: not kept. */
static int memo_put(const char *key, int lib) {
  pthread_mutex_lock(&g_memo_mu);
  for (size_t i = 0; i < g_memo_n; i++)
    if (strcmp(g_memo[i].key, key) == 0) {
      lib = g_memo[i].lib;
      pthread_mutex_unlock(&g_memo_mu);
      return lib;
    }
  if (g_memo_n == g_memo_cap) {
    size_t cap = g_memo_cap ? 2 * g_memo_cap : 32;
    memo_entry *m = realloc(g_memo, cap * sizeof *m);
    if (!m) {
      pthread_mutex_unlock(&g_memo_mu);
      return lib;
    }
    g_memo = m;
    g_memo_cap = cap;
  }
  char *k = strdup(key);
  if (k) {
    g_memo[g_memo_n].key = k;
    g_memo[g_memo_n].lib = lib;
    g_memo_n++;
  }
  pthread_mutex_unlock(&g_memo_mu);
  return lib;
}

void gcc_cpu_choice_forget(void) {
  pthread_mutex_lock(&g_memo_mu);
  for (size_t i = 0; i < g_memo_n; i++)
    free(g_memo[i].key);
  free(g_memo);
  g_memo = NULL;
  g_memo_n = g_memo_cap = 0;
  pthread_mutex_unlock(&g_memo_mu);
}

/* ---- the disk cache ---------------------------------------------------------- */

static uint64_t fnv1a64(const char *s) {
  uint64_t h = 14695981039346656037ull;
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ull;
  }
  return h;
}

unsigned long long gcc_cpu_choice_hash(const char *s) {
  return (unsigned long long)fnv1a64(s);
}

gcc_status gcc_cpu_choice_entry_path(const char *dir, const char *key, char *buf, size_t size,
                                     gcc_diag *d) {
  char base[4096];
  GCC_TRY(gcc_cache_dir(dir, "CPU choice cache", base, sizeof base, d));
  int w = snprintf(buf, size, "%s/cpu-choice-%016llx.txt", base,
                   (unsigned long long)fnv1a64(key ? key : ""));
  if (w < 0 || (size_t)w >= size)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "CPU choice cache: entry path is longer than %zu bytes", size);
  return GCC_OK;
}

/* The next line of b[*pos, n) without its '\n' into *line / *len; 0 when
 * there is no complete line. */
static int next_line(const char *b, size_t n, size_t *pos, const char **line, size_t *len) {
  if (*pos >= n)
    return 0;
  const char *nl = memchr(b + *pos, '\n', n - *pos);
  if (!nl)
    return 0;
  *line = b + *pos;
  *len = (size_t)(nl - (b + *pos));
  *pos += *len + 1;
  return 1;
}

static int starts(const char *line, size_t len, const char *prefix, size_t *plen) {
  *plen = strlen(prefix);
  return len >= *plen && memcmp(line, prefix, *plen) == 0;
}

/* Why the bytes of an entry do not give a choice for `key` among
 * `candidates`, or NULL (and *lib). */
static const char *parse_entry(const char *b, size_t n, const char *key, unsigned candidates,
                               int *lib) {
  size_t pos = 0, len, pl;
  const char *line;
  if (!next_line(b, n, &pos, &line, &len) || len != strlen(ENTRY_MAGIC) ||
      memcmp(line, ENTRY_MAGIC, len) != 0)
    return "not a gcc-train cpu choice entry of format 1";
  if (!next_line(b, n, &pos, &line, &len) || !starts(line, len, "key ", &pl))
    return "no key line";
  if (len - pl != strlen(key) || memcmp(line + pl, key, len - pl) != 0)
    return "its key is another one (a hash collision or an edited file)";
  if (!next_line(b, n, &pos, &line, &len) || !starts(line, len, "choice ", &pl))
    return "no choice line";
  int l = lib_of(line + pl, len - pl);
  if (l < 0)
    return "the choice names no library";
  if (!(candidates & (1u << l)))
    return "the choice is not a candidate of this node";
  if (!next_line(b, n, &pos, &line, &len) || !starts(line, len, "us ", &pl))
    return "no timing line (truncated)";
  if (pos != n)
    return "bytes after the entry";
  *lib = l;
  return NULL;
}

typedef enum { DISK_MISS, DISK_HIT, DISK_BAD } disk_result;

static disk_result read_entry(const char *path, const char *key, unsigned candidates, int *lib,
                              char *note, size_t note_size) {
  /* O_NONBLOCK: a FIFO planted at the entry path must not hang us */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      snprintf(note, note_size, "CPU choice cache: cannot read '%s': %s; re-timed", path,
               strerror(errno));
    return DISK_MISS;
  }
  struct stat st;
  char b[MAX_ENTRY];
  const char *why = NULL;
  size_t n = 0;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (st.st_size >= MAX_ENTRY) {
    why = "larger than any entry";
  } else {
    n = (size_t)st.st_size;
    size_t got = 0;
    while (got < n) {
      ssize_t r = read(fd, b + got, n - got);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        break;
      got += (size_t)r;
    }
    why = got != n ? "short read" : parse_entry(b, n, key, candidates, lib);
  }
  close(fd);
  if (why) {
    snprintf(note, note_size, "CPU choice cache: entry '%s' ignored (%s): re-timed and replaced",
             path, why);
    return DISK_BAD;
  }
  return DISK_HIT;
}

/* Writes the entry through a temporary file and rename; 1, or 0 with a note. */
static int write_entry(const char *path, const char *key, const gcc_cpu_choice *c,
                       unsigned candidates, char *note, size_t note_size) {
  char dir[4096];
  snprintf(dir, sizeof dir, "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash)
    *slash = '\0';
  int e = slash ? gcc_mkdir_p(dir) : 0;
  if (e != 0) {
    snprintf(note, note_size, "CPU choice cache: cannot create directory '%s': %s", dir,
             strerror(e));
    return 0;
  }
  char body[MAX_ENTRY];
  int w =
      snprintf(body, sizeof body, "%s\nkey %s\nchoice %s\nus", ENTRY_MAGIC, key, kNames[c->lib]);
  for (int i = 0; i < GCC_CPU_LIB_COUNT && w > 0 && (size_t)w < sizeof body; i++)
    if (candidates & (1u << i))
      w += snprintf(body + w, sizeof body - (size_t)w, " %s=%.1f", kNames[i], c->min_us[i]);
  if (w > 0 && (size_t)w < sizeof body - 1)
    body[w++] = '\n';
  if (w <= 0 || (size_t)w >= sizeof body) {
    snprintf(note, note_size, "CPU choice cache: entry for '%s' too long; not written", path);
    return 0;
  }
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path);
  int fd = mkstemp(tmp);
  if (fd < 0) {
    snprintf(note, note_size, "CPU choice cache: cannot create a file beside '%s': %s", path,
             strerror(errno));
    return 0;
  }
  size_t done = 0;
  int ok = 1;
  while (done < (size_t)w) {
    ssize_t r = write(fd, body + done, (size_t)w - done);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      ok = 0;
      break;
    }
    done += (size_t)r;
  }
  int err = ok ? 0 : errno;
  if (close(fd) != 0 && ok) {
    ok = 0;
    err = errno;
  }
  if (ok && rename(tmp, path) != 0) {
    ok = 0;
    err = errno;
  }
  if (!ok) {
    unlink(tmp);
    snprintf(note, note_size, "CPU choice cache: cannot write '%s': %s", path,
             err ? strerror(err) : "short write");
  }
  return ok;
}

/* ---- choose -------------------------------------------------------------------- */

static int disk_enabled(void) {
  const char *e = getenv("GCC_CPU_CHOICE_CACHE");
  return !(e && strcmp(e, "0") == 0);
}

static gcc_status time_candidates(const gcc_cpu_choice_req *r, gcc_cpu_choice *out, gcc_diag *d) {
  int libs[GCC_CPU_LIB_COUNT], n = 0;
  for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
    if (r->candidates & (1u << i))
      libs[n++] = i;
  double t0 = now_seconds();
  for (int i = 0; i < n && !r->grouped; i++) /* warm up: JIT, first touch, thread pools */
    GCC_TRY(r->run(r->user, libs[i], d));
  double best[GCC_CPU_LIB_COUNT];
  for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
    best[i] = 0;
  int rounds = 0;
  if (r->grouped) { /* each candidate alone: warm-up, then its rounds */
    rounds = GCC_CPU_CHOICE_ROUNDS;
    for (int j = 0; j < n; j++) {
      double s0 = now_seconds();
      GCC_TRY(r->run(r->user, libs[j], d));
      int k = 0;
      while (k < GCC_CPU_CHOICE_ROUNDS && (k == 0 || now_seconds() - s0 < r->budget_s / n)) {
        double s = now_seconds();
        GCC_TRY(r->run(r->user, libs[j], d));
        double us = 1e6 * (now_seconds() - s);
        if (k == 0 || us < best[libs[j]])
          best[libs[j]] = us;
        k++;
      }
      rounds = k < rounds ? k : rounds;
    }
  }
  while (!r->grouped && rounds < GCC_CPU_CHOICE_ROUNDS &&
         (rounds == 0 || now_seconds() - t0 < r->budget_s)) {
    for (int j = 0; j < n; j++) {
      int lib = libs[(j + rounds) % n]; /* rotate: a burst of load hits every candidate */
      double s = now_seconds();
      GCC_TRY(r->run(r->user, lib, d));
      double us = 1e6 * (now_seconds() - s);
      if (rounds == 0 || us < best[lib])
        best[lib] = us;
    }
    rounds++;
  }
  int win = libs[0];
  for (int i = 1; i < n; i++)
    if (best[libs[i]] < best[win])
      win = libs[i];
  out->lib = win;
  out->rounds = rounds;
  for (int i = 0; i < GCC_CPU_LIB_COUNT; i++)
    out->min_us[i] = best[i];
  out->how = GCC_CPU_CHOICE_TIMED;
  return GCC_OK;
}

gcc_status gcc_cpu_choose(const gcc_cpu_choice_req *r, gcc_cpu_choice *out, gcc_diag *d) {
  double t0 = now_seconds();
  memset(out, 0, sizeof *out);
  if (!r || !r->key || !r->run)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "CPU choice: %s is NULL",
                        !r        ? "the request"
                        : !r->key ? "the key"
                                  : "the run function");
  if (strchr(r->key, '\n') || strlen(r->key) > MAX_KEY)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "CPU choice: the key has a newline or is longer than %d bytes: '%.80s'",
                        MAX_KEY, r->key);
  unsigned mask = r->candidates & ((1u << GCC_CPU_LIB_COUNT) - 1);
  if (!mask)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "CPU choice: no candidate for '%s'", r->key);

  int lib = memo_get(r->key);
  if (lib >= 0 && (mask & (1u << lib))) {
    out->lib = lib;
    out->how = GCC_CPU_CHOICE_MEMO;
    out->seconds = now_seconds() - t0;
    return GCC_OK;
  }

  char path[4200];
  int disk = r->use_disk && disk_enabled(), no_dir = 0;
  if (disk) {
    gcc_diag dd = {0};
    if (gcc_cpu_choice_entry_path(r->dir, r->key, path, sizeof path, &dd) != GCC_OK) {
      snprintf(out->note, sizeof out->note,
               "CPU choice cache disabled: %s; not timed (the first candidate), as a choice "
               "that no cache keeps could differ between runs and a resumed run would not be "
               "bitwise the uninterrupted one",
               dd.msg);
      disk = 0;
      no_dir = 1;
    }
  }
  if (disk && read_entry(path, r->key, mask, &lib, out->note, sizeof out->note) == DISK_HIT) {
    out->lib = memo_put(r->key, lib);
    out->how = GCC_CPU_CHOICE_CACHED;
    out->seconds = now_seconds() - t0;
    return GCC_OK;
  }

  /* one candidate, not to be timed, or no cache directory to keep the choice
   * for the next run of this machine (HOME and XDG_CACHE_HOME unset, as in a
   * Bazel test): the first candidate, so that every process agrees */
  if ((mask & (mask - 1)) == 0 || r->budget_s < 0 || no_dir) {
    out->lib = __builtin_ctz(mask);
    out->how = GCC_CPU_CHOICE_UNTIMED;
    out->lib = memo_put(r->key, out->lib);
    out->seconds = now_seconds() - t0;
    return GCC_OK;
  }

  gcc_cpu_choice_req rr = *r;
  rr.candidates = mask;
  GCC_TRY(time_candidates(&rr, out, d));
  int kept = memo_put(r->key, out->lib);
  if (kept != out->lib) { /* another thread chose first: follow it */
    out->lib = kept;
    out->how = GCC_CPU_CHOICE_MEMO;
  } else if (disk) {
    char note[sizeof out->note] = "";
    size_t used = strlen(out->note);
    if (!write_entry(path, r->key, out, mask, note, sizeof note))
      snprintf(out->note + used, sizeof out->note - used, "%s%s", used ? "; " : "", note);
  }
  out->seconds = now_seconds() - t0;
  return GCC_OK;
}
