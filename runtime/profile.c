/*
 * profile.c - event storage, aggregation and the Chrome trace writer of
 * the --profile tracer (see profile.h for the file format).
 */
#include "runtime/profile.h"
#include "graph/util.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/outfile.h"

enum { CHUNK_EVENTS = 4096 };

typedef struct event {
  int64_t t0, dur, index;
  int32_t site, pad;
} event;

typedef struct chunk {
  struct chunk *next;
  int n;
  event ev[CHUNK_EVENTS];
} chunk;

struct gcc_prof_track {
  gcc_profiler *p;
  int tid;
  char *name;
  chunk *head, *tail;
  int64_t dropped;
};

typedef struct site {
  gcc_prof_cat cat;
  char *name, *op, *plan, *args;
  double flops, bytes;
} site;

struct gcc_profiler {
  char *path;
  int64_t origin;
  pthread_mutex_t mu;
  gcc_prof_track **tracks;
  int n_tracks, cap_tracks;
  site *sites;
  int n_sites, cap_sites;
  atomic_llong reserved; /* events of all chunks allocated so far */
};

static const char *const cat_names[GCC_PROF_CAT_COUNT] = {
    "op", "copy", "step", "eval", "loader", "wait", "compile", "phase",
};

const char *gcc_prof_cat_name(gcc_prof_cat c) {
  return (unsigned)c < GCC_PROF_CAT_COUNT ? cat_names[c] : "?";
}

gcc_status gcc_profiler_create(const char *path, gcc_profiler **out, gcc_diag *d) {
  if (!out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "gcc_profiler_create: out is NULL");
  *out = NULL;
  if (!path || !*path)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "--profile: the trace file name is empty");
  /* the writer's checks, now: a bad path fails before the run */
  GCC_TRY(gcc_outfile_check(path, "--profile", d));

  gcc_profiler *p = calloc(1, sizeof *p);
  if (!p || !(p->path = gcc_strdup(path)) || pthread_mutex_init(&p->mu, NULL) != 0) {
    if (p)
      free(p->path);
    free(p);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profiler)");
  }
  atomic_init(&p->reserved, 0);
  p->origin = gcc_prof_now();
  *out = p;
  return GCC_OK;
}

void gcc_profiler_destroy(gcc_profiler *p) {
  if (!p)
    return;
  for (int i = 0; i < p->n_tracks; i++) {
    gcc_prof_track *t = p->tracks[i];
    for (chunk *c = t->head, *next; c; c = next) {
      next = c->next;
      free(c);
    }
    free(t->name);
    free(t);
  }
  free(p->tracks);
  for (int i = 0; i < p->n_sites; i++) {
    free(p->sites[i].name);
    free(p->sites[i].op);
    free(p->sites[i].plan);
    free(p->sites[i].args);
  }
  free(p->sites);
  pthread_mutex_destroy(&p->mu);
  free(p->path);
  free(p);
}

const char *gcc_profiler_path(const gcc_profiler *p) {
  return p->path;
}

gcc_prof_track *gcc_profiler_track(gcc_profiler *p, const char *thread_name) {
  if (!p)
    return NULL;
  gcc_prof_track *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  t->p = p;
  t->name = gcc_strdup(thread_name ? thread_name : "thread");
  pthread_mutex_lock(&p->mu);
  if (t->name && p->n_tracks == p->cap_tracks) {
    int cap = p->cap_tracks ? 2 * p->cap_tracks : 8;
    gcc_prof_track **n = realloc(p->tracks, (size_t)cap * sizeof *n);
    if (n) {
      p->tracks = n;
      p->cap_tracks = cap;
    }
  }
  if (!t->name || p->n_tracks == p->cap_tracks) {
    pthread_mutex_unlock(&p->mu);
    free(t->name);
    free(t);
    return NULL;
  }
  t->tid = p->n_tracks + 1;
  p->tracks[p->n_tracks++] = t;
  pthread_mutex_unlock(&p->mu);
  return t;
}

int gcc_profiler_site(gcc_profiler *p, gcc_prof_cat cat, const char *name, const char *op,
                      const char *plan, const char *args_json, double flops, double bytes) {
  if (!p || (unsigned)cat >= GCC_PROF_CAT_COUNT || !name)
    return -1;
  site s = {cat,  gcc_strdup(name), gcc_strdup(op), gcc_strdup(plan), gcc_strdup(args_json), flops,
            bytes};
  int id = -1;
  if (s.name && (!op || s.op) && (!plan || s.plan) && (!args_json || s.args)) {
    pthread_mutex_lock(&p->mu);
    if (p->n_sites == p->cap_sites) {
      int cap = p->cap_sites ? 2 * p->cap_sites : 64;
      site *n = realloc(p->sites, (size_t)cap * sizeof *n);
      if (n) {
        p->sites = n;
        p->cap_sites = cap;
      }
    }
    if (p->n_sites < p->cap_sites) {
      id = p->n_sites;
      p->sites[p->n_sites++] = s;
    }
    pthread_mutex_unlock(&p->mu);
  }
  if (id < 0) {
    free(s.name);
    free(s.op);
    free(s.plan);
    free(s.args);
  }
  return id;
}

void gcc_prof_record(gcc_prof_track *t, int site, int64_t t0, int64_t t1, int64_t index) {
  if (!t || site < 0)
    return;
  chunk *c = t->tail;
  if (!c || c->n == CHUNK_EVENTS) {
    gcc_profiler *p = t->p;
    if (atomic_load_explicit(&p->reserved, memory_order_relaxed) >= GCC_PROF_MAX_EVENTS ||
        !(c = malloc(sizeof *c))) {
      t->dropped++;
      return;
    }
    atomic_fetch_add_explicit(&p->reserved, CHUNK_EVENTS, memory_order_relaxed);
    c->next = NULL;
    c->n = 0;
    if (t->tail)
      t->tail->next = c;
    else
      t->head = c;
    t->tail = c;
  }
  event *e = &c->ev[c->n++];
  e->t0 = t0;
  e->dur = t1 >= t0 ? t1 - t0 : 0;
  e->index = index;
  e->site = site;
  e->pad = 0;
}

/* ---- aggregation ------------------------------------------------------ */

typedef struct site_stat {
  int64_t calls, ns;
} site_stat;

static void mode_of(const site *s, char out[16]) {
  size_t n = 0;
  if (s->plan)
    while (s->plan[n] && s->plan[n] != ' ' && n < 15)
      n++;
  memcpy(out, s->plan ? s->plan : "", n);
  out[n] = '\0';
}

static int row_cmp(const void *a, const void *b) {
  const gcc_prof_row *x = a, *y = b;
  int tx = strcmp(x->mode, "train") != 0, ty = strcmp(y->mode, "train") != 0;
  if (tx != ty)
    return tx - ty;
  int m = strcmp(x->mode, y->mode);
  if (m)
    return m;
  if (x->total_ns != y->total_ns)
    return x->total_ns > y->total_ns ? -1 : 1;
  return strcmp(x->op, y->op);
}

static int total_cmp(const void *a, const void *b) {
  const gcc_prof_row *x = a, *y = b;
  if (x->total_ns != y->total_ns)
    return x->total_ns > y->total_ns ? -1 : 1;
  return strcmp(x->op, y->op);
}

/* adds one site's stats into rows[] under (mode, key) */
static void add_row(gcc_prof_row *rows, int *n, const char *mode, const char *key,
                    const site_stat *st, double flops) {
  int i = 0;
  while (i < *n &&
         !(strcmp(rows[i].mode, mode) == 0 && strncmp(rows[i].op, key, sizeof rows[i].op - 1) == 0))
    i++;
  if (i == *n) {
    memset(&rows[i], 0, sizeof rows[i]);
    snprintf(rows[i].mode, sizeof rows[i].mode, "%s", mode);
    snprintf(rows[i].op, sizeof rows[i].op, "%s", key);
    (*n)++;
  }
  rows[i].calls += st->calls;
  rows[i].total_ns += st->ns;
  rows[i].flops += flops * (double)st->calls;
}

gcc_status gcc_profiler_summary(const gcc_profiler *p, gcc_prof_summary *s, gcc_diag *d) {
  memset(s, 0, sizeof *s);
  int ns = p->n_sites;
  site_stat *st = calloc((size_t)(ns ? ns : 1), sizeof *st);
  s->rows = calloc((size_t)(ns ? ns : 1), sizeof *s->rows);
  s->nodes = calloc((size_t)(ns ? ns : 1), sizeof *s->nodes);
  if (!st || !s->rows || !s->nodes) {
    free(st);
    gcc_prof_summary_free(s);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "out of memory (profile summary)");
  }
  for (int i = 0; i < p->n_tracks; i++) {
    const gcc_prof_track *t = p->tracks[i];
    s->dropped += t->dropped;
    for (const chunk *c = t->head; c; c = c->next)
      for (int k = 0; k < c->n; k++) {
        const event *e = &c->ev[k];
        st[e->site].calls++;
        st[e->site].ns += e->dur;
        s->events++;
      }
  }
  for (int i = 0; i < ns; i++) {
    const site *si = &p->sites[i];
    s->count[si->cat] += st[i].calls;
    s->total_ns[si->cat] += st[i].ns;
    if ((si->cat != GCC_PROF_OP && si->cat != GCC_PROF_COPY) || !st[i].calls)
      continue;
    char mode[16];
    mode_of(si, mode);
    add_row(s->rows, &s->n_rows, mode, si->op ? si->op : "?", &st[i], si->flops);
    if (strcmp(mode, "train") == 0) {
      /* the node name: the site name without its " (OpType)" suffix */
      char key[sizeof s->nodes[0].op];
      snprintf(key, sizeof key, "%s", si->name);
      char *paren = strrchr(key, '(');
      if (paren && paren > key && paren[-1] == ' ')
        paren[-1] = '\0';
      add_row(s->nodes, &s->n_nodes, si->op ? si->op : "?", key, &st[i], si->flops);
    }
  }
  free(st);
  qsort(s->rows, (size_t)s->n_rows, sizeof *s->rows, row_cmp);
  qsort(s->nodes, (size_t)s->n_nodes, sizeof *s->nodes, total_cmp);
  return GCC_OK;
}

void gcc_prof_summary_free(gcc_prof_summary *s) {
  free(s->rows);
  free(s->nodes);
  s->rows = s->nodes = NULL;
  s->n_rows = s->n_nodes = 0;
}

/* one table line: calls, total ms, mean us, % of base_ns, GFLOP/s */
static void put_row(FILE *f, const char *a, const char *b, const gcc_prof_row *r, int64_t base_ns) {
  char gf[32] = "";
  if (r->flops > 0 && r->total_ns > 0)
    snprintf(gf, sizeof gf, "%.1f", r->flops / (double)r->total_ns);
  fprintf(f, "| %s | %s | %lld | %.3f | %.2f | %.1f%% | %s |\n", a, b, (long long)r->calls,
          1e-6 * (double)r->total_ns,
          r->calls ? 1e-3 * (double)r->total_ns / (double)r->calls : 0.0,
          base_ns > 0 ? 100.0 * (double)r->total_ns / (double)base_ns : 0.0, gf);
}

gcc_status gcc_profiler_print_table(const gcc_profiler *p, FILE *f, gcc_diag *d) {
  gcc_prof_summary s;
  GCC_TRY(gcc_profiler_summary(p, &s, d));
  int64_t train_ns = s.total_ns[GCC_PROF_STEP], eval_ns = s.total_ns[GCC_PROF_EVAL];
  int64_t steps = s.count[GCC_PROF_STEP], evals = s.count[GCC_PROF_EVAL];
  fprintf(f,
          "\nprofile: %lld training steps in %.3f ms (%.1f us/step), %lld evaluation batches "
          "in %.3f ms; trace %s (%lld events",
          (long long)steps, 1e-6 * (double)train_ns,
          steps ? 1e-3 * (double)train_ns / (double)steps : 0.0, (long long)evals,
          1e-6 * (double)eval_ns, p->path, (long long)s.events);
  if (s.dropped)
    fprintf(f, ", %lld dropped over the %lld-event limit", (long long)s.dropped,
            (long long)GCC_PROF_MAX_EVENTS);
  fprintf(f, ")\n\nper op type ('%% of step time': of the training steps for train, of the "
             "evaluation batches for eval):\n\n");
  fprintf(f, "| mode | op | calls | total ms | mean us | %% of step time | GFLOP/s |\n");
  fprintf(f, "|---|---|---:|---:|---:|---:|---:|\n");
  int64_t op_ns[2] = {0, 0};
  for (int i = 0; i < s.n_rows; i++) {
    const gcc_prof_row *r = &s.rows[i];
    int train = strcmp(r->mode, "train") == 0;
    int64_t base = train ? train_ns : eval_ns;
    op_ns[!train] += r->total_ns;
    put_row(f, r->mode, r->op, r, base);
  }
  if (train_ns > 0) {
    gcc_prof_row rest = {"train", "", steps, train_ns - op_ns[0], 0};
    put_row(f, "train", "(between ops: binding, loss check, timer)", &rest, train_ns);
  }
  if (s.n_nodes > 0) {
    fprintf(f, "\nslowest nodes of the training steps:\n\n"
               "| node | op | calls | total ms | mean us | %% of step time | GFLOP/s |\n"
               "|---|---|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < s.n_nodes && i < 10; i++)
      put_row(f, s.nodes[i].op, s.nodes[i].mode, &s.nodes[i], train_ns);
  }
  int64_t lb = s.count[GCC_PROF_LOADER], wb = s.count[GCC_PROF_WAIT];
  fprintf(f,
          "\ndata loader thread: %lld batches assembled in %.3f ms (%.1f us/batch, "
          "overlapped with the steps); main thread waited for a batch %lld times, "
          "%.3f ms in all (%.1f us/wait); %lld plan compiles, %.3f ms\n",
          (long long)lb, 1e-6 * (double)s.total_ns[GCC_PROF_LOADER],
          lb ? 1e-3 * (double)s.total_ns[GCC_PROF_LOADER] / (double)lb : 0.0, (long long)wb,
          1e-6 * (double)s.total_ns[GCC_PROF_WAIT],
          wb ? 1e-3 * (double)s.total_ns[GCC_PROF_WAIT] / (double)wb : 0.0,
          (long long)s.count[GCC_PROF_COMPILE], 1e-6 * (double)s.total_ns[GCC_PROF_COMPILE]);
  gcc_prof_summary_free(&s);
  if (fflush(f) != 0 || ferror(f))
    return gcc_diag_set(d, GCC_ERR_IO, "cannot print the profile table: %s", strerror(errno));
  return GCC_OK;
}

/* ---- the trace writer ------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1-4), or 0 if invalid. */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n;
  unsigned min;
  if (c < 0x80)
    return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    min = 0x80;
    c &= 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    min = 0x800;
    c &= 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    min = 0x10000;
    c &= 0x07;
  } else {
    return 0;
  }
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    c = (c << 6) | (s[i] & 0x3F);
  }
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
    return 0;
  return n;
}

/* A JSON string (RFC 8259): quotes, backslash and control characters
 * escaped; bytes that are not valid UTF-8 become U+FFFD. */
static void put_json_string(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  fputc('"', f);
  while (*s) {
    unsigned c = *s;
    if (c == '"' || c == '\\') {
      fputc('\\', f);
      fputc((int)c, f);
      s++;
    } else if (c < 0x20) {
      switch (c) {
      case '\n': fputs("\\n", f); break;
      case '\r': fputs("\\r", f); break;
      case '\t': fputs("\\t", f); break;
      default: fprintf(f, "\\u%04x", c); break;
      }
      s++;
    } else {
      int n = utf8_len(s);
      if (n == 0) {
        fputs("\\ufffd", f);
        s++;
      } else {
        fwrite(s, 1, (size_t)n, f);
        s += n;
      }
    }
  }
  fputc('"', f);
}

/* a decimal integer */
static void put_int(FILE *f, int64_t v) {
  char buf[24], *q = buf + sizeof buf;
  uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
  do
    *--q = (char)('0' + u % 10);
  while ((u /= 10) != 0);
  if (v < 0)
    *--q = '-';
  fwrite(q, 1, (size_t)(buf + sizeof buf - q), f);
}

/* microseconds with exact nanoseconds: "12.345" */
static void put_us(FILE *f, int64_t ns) {
  if (ns < 0)
    ns = 0;
  put_int(f, ns / 1000);
  char frac[4] = {'.', (char)('0' + ns % 1000 / 100), (char)('0' + ns % 100 / 10),
                  (char)('0' + ns % 10)};
  fwrite(frac, 1, sizeof frac, f);
}

static const char *index_key(gcc_prof_cat c) {
  switch (c) {
  case GCC_PROF_OP:
  case GCC_PROF_COPY:
  case GCC_PROF_STEP: return "step";
  case GCC_PROF_EVAL:
  case GCC_PROF_LOADER:
  case GCC_PROF_WAIT: return "batch";
  default: return "index";
  }
}

/* What every event of a site shares, rendered once: the head up to "tid":
 * and the tail after the index arg. */
typedef struct rendered {
  char *head, *tail;
  size_t head_len, tail_len;
} rendered;

static int render_site(const site *s, int pid, rendered *r) {
  FILE *f = open_memstream(&r->head, &r->head_len);
  if (!f)
    return 0;
  fputs("{\"name\":", f);
  put_json_string(f, s->name);
  fprintf(f, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":", gcc_prof_cat_name(s->cat), pid);
  if (fclose(f) != 0)
    return 0;
  f = open_memstream(&r->tail, &r->tail_len);
  if (!f)
    return 0;
  if (s->op) {
    fputs(",\"op\":", f);
    put_json_string(f, s->op);
  }
  if (s->plan) {
    fputs(",\"plan\":", f);
    put_json_string(f, s->plan);
  }
  if (s->flops > 0)
    fprintf(f, ",\"flops\":%.0f", s->flops);
  if (s->bytes > 0)
    fprintf(f, ",\"bytes\":%.0f", s->bytes);
  if (s->args && *s->args) {
    fputc(',', f);
    fputs(s->args, f);
  }
  fputs("}}", f);
  return fclose(f) == 0;
}

/* Streams the whole trace to f. Returns 0 when out of memory. */
static int put_trace(const gcc_profiler *p, FILE *f, int pid) {
  int64_t events = 0, dropped = 0;
  rendered *r = calloc((size_t)(p->n_sites ? p->n_sites : 1), sizeof *r);
  int ok = r != NULL;
  for (int i = 0; ok && i < p->n_sites; i++)
    ok = render_site(&p->sites[i], pid, &r[i]);
  if (ok) {
    fprintf(f, "{\"traceEvents\":[\n");
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
            "\"args\":{\"name\":\"gcc-train\"}}",
            pid);
    for (int i = 0; i < p->n_tracks; i++) {
      const gcc_prof_track *t = p->tracks[i];
      fprintf(f,
              ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{"
              "\"name\":",
              pid, t->tid);
      put_json_string(f, t->name);
      fprintf(f,
              "}},\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
              "\"args\":{\"sort_index\":%d}}",
              pid, t->tid, t->tid);
    }
    for (int i = 0; i < p->n_tracks; i++) {
      const gcc_prof_track *t = p->tracks[i];
      dropped += t->dropped;
      for (const chunk *c = t->head; c; c = c->next)
        for (int k = 0; k < c->n; k++) {
          const event *e = &c->ev[k];
          const rendered *rs = &r[e->site];
          fputs(",\n", f);
          fwrite(rs->head, 1, rs->head_len, f);
          put_int(f, t->tid);
          fputs(",\"ts\":", f);
          put_us(f, e->t0 - p->origin);
          fputs(",\"dur\":", f);
          put_us(f, e->dur);
          fputs(",\"args\":{\"", f);
          fputs(index_key(p->sites[e->site].cat), f);
          fputs("\":", f);
          put_int(f, e->index);
          fwrite(rs->tail, 1, rs->tail_len, f);
          events++;
        }
    }
    fprintf(f,
            "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"producer\":\"gcc-train "
            "--profile\",\"clock\":\"CLOCK_MONOTONIC\",\"events\":%lld,"
            "\"dropped_events\":%lld}}\n",
            (long long)events, (long long)dropped);
  }
  for (int i = 0; r && i < p->n_sites; i++) {
    free(r[i].head);
    free(r[i].tail);
  }
  free(r);
  return ok;
}

gcc_status gcc_profiler_write(const gcc_profiler *p, gcc_diag *d) {
  gcc_outfile o;
  GCC_TRY(gcc_outfile_open(&o, p->path, "--profile", d));
  char *buf = malloc(1 << 20);
  if (buf)
    setvbuf(o.f, buf, _IOFBF, 1 << 20);
  if (!put_trace(p, o.f, (int)getpid()) && !o.err)
    o.err = ENOMEM;
  gcc_status s = gcc_outfile_commit(&o, d);
  free(buf);
  return s;
}
