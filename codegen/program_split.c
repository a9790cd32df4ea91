/*
 * program_split.c - a generated translation unit split into NVRTC programs
 * and compiled on several threads (codegen/program_split.h).
 */
#include "codegen/program_split.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- scanning top-level items ------------------------------------------ */

typedef struct item {
  size_t begin, end; /* [begin, end) of the source */
  int kernel;        /* the kernel it defines or names (index in source order), or -1 */
} item;

typedef struct scan {
  const char *src;
  item *items;
  int n_items, cap_items;
  char **names; /* kernel names in source order */
  int n_names, cap_names;
} scan;

static int push_item(scan *s, size_t b, size_t e) {
  if (s->n_items == s->cap_items) {
    int cap = s->cap_items ? 2 * s->cap_items : 256;
    item *p = realloc(s->items, (size_t)cap * sizeof *p);
    if (!p)
      return 0;
    s->items = p;
    s->cap_items = cap;
  }
  s->items[s->n_items++] = (item){b, e, -1};
  return 1;
}

static int is_ident(char c) {
  return isalnum((unsigned char)c) || c == '_';
}

/* the first non-blank character of the line starting at p is '#' */
static int directive_at(const char *p) {
  while (*p == ' ' || *p == '\t')
    p++;
  return *p == '#';
}

/* the preprocessor keyword of the directive line at p ("if", "endif", ...) */
static void directive_word(const char *p, char *w, size_t cap) {
  while (*p == ' ' || *p == '\t')
    p++;
  p++; /* '#' */
  while (*p == ' ' || *p == '\t')
    p++;
  size_t n = 0;
  while (is_ident(p[n]) && n + 1 < cap) {
    w[n] = p[n];
    n++;
  }
  w[n] = '\0';
}

/* Cuts the source into top-level items: an item ends at the end of a line
 * where no brace, parenthesis or #if is open and the item holds code (a ';'
 * or '}' at depth 0, or a directive). Comments and blank lines go with the
 * next item. Fails (0, reason) on unbalanced braces or #if blocks or an
 * unterminated comment or literal. */
static int cut_items(scan *s, char *why, size_t why_cap) {
  const char *src = s->src;
  size_t i = 0, n = strlen(src), begin = 0;
  int depth = 0, pp = 0, has_code = 0, line_start = 1;
  while (i < n) {
    char c = src[i];
    if (line_start && directive_at(src + i)) {
      char w[16];
      directive_word(src + i, w, sizeof w);
      if (!strncmp(w, "if", 2)) /* if, ifdef, ifndef */
        pp++;
      else if (!strcmp(w, "endif"))
        pp--;
      if (pp < 0) {
        snprintf(why, why_cap, "an #endif without #if near byte %zu", i);
        return 0;
      }
      has_code = 1;
      /* to the end of the directive (with backslash continuations) */
      while (i < n && !(src[i] == '\n' && (i == 0 || src[i - 1] != '\\')))
        i++;
    } else if (c == '/' && src[i + 1] == '*') {
      const char *e = strstr(src + i + 2, "*/");
      if (!e) {
        snprintf(why, why_cap, "an unterminated comment at byte %zu", i);
        return 0;
      }
      i = (size_t)(e - src) + 1;
    } else if (c == '/' && src[i + 1] == '/') {
      while (i < n && src[i] != '\n')
        i++;
      continue; /* the newline ends the line below */
    } else if (c == '"' || c == '\'') {
      size_t j = i + 1;
      while (j < n && src[j] != c && src[j] != '\n')
        j += src[j] == '\\' ? 2 : 1;
      if (j >= n || src[j] != c) {
        snprintf(why, why_cap, "an unterminated literal at byte %zu", i);
        return 0;
      }
      i = j;
      has_code = 1;
    } else if (c == '{' || c == '(' || c == '[') {
      depth++;
      has_code = 1;
    } else if (c == '}' || c == ')' || c == ']') {
      if (--depth < 0) {
        snprintf(why, why_cap, "an unbalanced '%c' at byte %zu", c, i);
        return 0;
      }
      has_code = 1;
    } else if (c == ';') {
      has_code = 1;
    } else if (!isspace((unsigned char)c)) {
      has_code = 1;
    }
    if (i < n && src[i] == '\n') {
      line_start = 1;
      if (depth == 0 && pp == 0 && has_code) {
        /* a line that ends inside a declaration (no ';' or '}' yet) keeps
         * the item open: look at the last code character of the line */
        size_t k = i;
        while (k > begin && isspace((unsigned char)src[k - 1]))
          k--;
        char last = k > begin ? src[k - 1] : '\0';
        int directive_line = 0;
        size_t ls = k;
        while (ls > begin && src[ls - 1] != '\n')
          ls--;
        directive_line = directive_at(src + ls);
        if (last == ';' || last == '}' || directive_line) {
          if (!push_item(s, begin, i + 1))
            return -1;
          begin = i + 1;
          has_code = 0;
        }
      }
    } else {
      line_start = 0;
    }
    i++;
  }
  if (depth != 0 || pp != 0) {
    snprintf(why, why_cap, "%d brace(s) and %d #if block(s) still open at the end", depth, pp);
    return 0;
  }
  if (begin < n && !push_item(s, begin, n))
    return -1;
  return 1;
}

/* next identifier in [*p, e): its start and length, 0 at the end; skips
 * comments and literals */
static int next_ident(const char **p, const char *e, const char **id, size_t *len) {
  const char *q = *p;
  while (q < e) {
    if (q[0] == '/' && q + 1 < e && q[1] == '*') {
      const char *c = strstr(q + 2, "*/");
      q = c && c < e ? c + 2 : e;
    } else if (q[0] == '/' && q + 1 < e && q[1] == '/') {
      while (q < e && *q != '\n')
        q++;
    } else if (*q == '"' || *q == '\'') {
      char c = *q++;
      while (q < e && *q != c)
        q += *q == '\\' ? 2 : 1;
      q++;
    } else if (is_ident(*q) && !isdigit((unsigned char)*q)) {
      const char *b = q;
      while (q < e && is_ident(*q))
        q++;
      *id = b;
      *len = (size_t)(q - b);
      *p = q;
      return 1;
    } else if (isdigit((unsigned char)*q)) {
      while (q < e && is_ident(*q))
        q++;
    } else {
      q++;
    }
  }
  *p = e;
  return 0;
}

static int tok_is(const char *id, size_t len, const char *w) {
  return len == strlen(w) && !memcmp(id, w, len);
}

/* An item defining a __global__ function: its name into the scan's list.
 * Returns 1 (a kernel), 0 (no __global__), -1 (out of memory), -2 (a
 * __global__ that is not extern "C": why set). */
static int find_kernel(scan *s, item *it, char *why, size_t why_cap) {
  const char *p = s->src + it->begin, *e = s->src + it->end, *id;
  size_t len;
  int seen_global = 0, seen_extern_c = 0;
  while (next_ident(&p, e, &id, &len)) {
    if (tok_is(id, len, "extern")) {
      const char *q = p;
      while (q < e && isspace((unsigned char)*q))
        q++;
      seen_extern_c |= q + 3 <= e && !memcmp(q, "\"C\"", 3);
    } else if (tok_is(id, len, "__global__")) {
      seen_global = 1;
    } else if (seen_global) {
      /* the name is the identifier before the first '(' after __global__ */
      const char *q = p;
      while (q < e && isspace((unsigned char)*q))
        q++;
      if (q < e && *q == '(') {
        if (!seen_extern_c) {
          snprintf(why, why_cap, "kernel %.*s is not extern \"C\"", (int)len, id);
          return -2;
        }
        if (s->n_names == s->cap_names) {
          int cap = s->cap_names ? 2 * s->cap_names : 64;
          char **nn = realloc(s->names, (size_t)cap * sizeof *nn);
          if (!nn)
            return -1;
          s->names = nn;
          s->cap_names = cap;
        }
        char *name = malloc(len + 1);
        if (!name)
          return -1;
        memcpy(name, id, len);
        name[len] = '\0';
        s->names[s->n_names] = name;
        it->kernel = s->n_names++;
        return 1;
      }
    }
  }
  return 0;
}

typedef struct name_ref {
  const char *name;
  int index;
} name_ref;

static int cmp_ref(const void *a, const void *b) {
  return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

int gcc_program_count(int n_kernels) {
  if (n_kernels <= 0)
    return 0;
  int n = (n_kernels + GCC_PROGRAM_KERNELS - 1) / GCC_PROGRAM_KERNELS;
  return n < 1 ? 1 : n > GCC_PROGRAM_MAX ? GCC_PROGRAM_MAX : n;
}

/* the program of kernel k (source order) of n in `programs` programs:
 * contiguous runs, the first n % programs runs one kernel longer */
static int program_of(int k, int n, int programs) {
  int base = n / programs, extra = n % programs;
  int cut = extra * (base + 1);
  return k < cut ? k / (base + 1) : extra + (k - cut) / base;
}

void gcc_program_split_free(gcc_program_split *s) {
  if (!s)
    return;
  for (int i = 0; i < s->n_programs; i++)
    free(s->programs[i].source);
  free(s->programs);
  for (int i = 0; i < s->n_kernels; i++)
    free(s->kernel_names[i]);
  free(s->kernel_names);
  memset(s, 0, sizeof *s);
}

gcc_status gcc_program_split_source(const char *source, gcc_program_split *out, gcc_diag *d) {
  if (!out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "program split: out is NULL");
  memset(out, 0, sizeof *out);
  if (!source)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "program split: source is NULL");
  scan s = {source, NULL, 0, 0, NULL, 0, 0};
  char why[256] = "";
  gcc_status st = GCC_OK;
  name_ref *refs = NULL;
  int *prog_of_item = NULL;
  int r = cut_items(&s, why, sizeof why);
  if (r < 0)
    goto oom;
  if (r == 0) {
    st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "program split: %s", why);
    goto done;
  }
  for (int i = 0; i < s.n_items; i++) {
    r = find_kernel(&s, &s.items[i], why, sizeof why);
    if (r == -1)
      goto oom;
    if (r == -2) {
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "program split: %s", why);
      goto done;
    }
  }
  if (s.n_names == 0) {
    st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "program split: the source defines no kernel");
    goto done;
  }
  /* the kernels' names, sorted, to find the items that name a kernel */
  refs = malloc((size_t)s.n_names * sizeof *refs);
  prog_of_item = malloc((size_t)s.n_items * sizeof *prog_of_item);
  if (!refs || !prog_of_item)
    goto oom;
  for (int k = 0; k < s.n_names; k++)
    refs[k] = (name_ref){s.names[k], k};
  qsort(refs, (size_t)s.n_names, sizeof *refs, cmp_ref);
  for (int k = 1; k < s.n_names; k++)
    if (!strcmp(refs[k - 1].name, refs[k].name)) {
      st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "program split: kernel %s is defined twice",
                        refs[k].name);
      goto done;
    }
  int np = gcc_program_count(s.n_names);
  for (int i = 0; i < s.n_items; i++) {
    item *it = &s.items[i];
    prog_of_item[i] = it->kernel >= 0 ? program_of(it->kernel, s.n_names, np) : -1;
    if (it->kernel >= 0)
      continue;
    const char *p = source + it->begin, *e = source + it->end, *id;
    size_t len;
    char tok[256];
    while (next_ident(&p, e, &id, &len)) {
      if (len >= sizeof tok)
        continue;
      memcpy(tok, id, len);
      tok[len] = '\0';
      name_ref key = {tok, 0};
      name_ref *hit = bsearch(&key, refs, (size_t)s.n_names, sizeof *refs, cmp_ref);
      if (!hit)
        continue;
      int pk = program_of(hit->index, s.n_names, np);
      if (prog_of_item[i] >= 0 && prog_of_item[i] != pk) {
        st = gcc_diag_set(d, GCC_ERR_UNSUPPORTED,
                          "program split: the item at byte %zu names kernels of programs %d "
                          "and %d (%s)",
                          it->begin, prog_of_item[i], pk, tok);
        goto done;
      }
      prog_of_item[i] = pk;
    }
  }
  out->programs = calloc((size_t)np, sizeof *out->programs);
  if (!out->programs)
    goto oom;
  out->n_programs = np;
  for (int p = 0; p < np; p++) {
    size_t bytes = 1;
    for (int i = 0; i < s.n_items; i++)
      if (prog_of_item[i] < 0 || prog_of_item[i] == p)
        bytes += s.items[i].end - s.items[i].begin;
    char *src = malloc(bytes);
    if (!src)
      goto oom;
    size_t at = 0;
    for (int i = 0; i < s.n_items; i++)
      if (prog_of_item[i] < 0 || prog_of_item[i] == p) {
        memcpy(src + at, source + s.items[i].begin, s.items[i].end - s.items[i].begin);
        at += s.items[i].end - s.items[i].begin;
      }
    src[at] = '\0';
    out->programs[p].source = src;
    out->programs[p].first = -1;
  }
  for (int k = 0; k < s.n_names; k++) {
    gcc_program *pr = &out->programs[program_of(k, s.n_names, np)];
    if (pr->first < 0)
      pr->first = k;
    pr->count++;
  }
  out->kernel_names = s.names;
  out->n_kernels = s.n_names;
  s.names = NULL;
  s.n_names = 0;
  goto done;
oom:
  st = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "program split: out of memory");
done:
  for (int k = 0; k < s.n_names; k++)
    free(s.names[k]);
  free(s.names);
  free(s.items);
  free(refs);
  free(prog_of_item);
  if (st != GCC_OK)
    gcc_program_split_free(out);
  return st;
}

/* ---- compiling on several threads -------------------------------------- */

typedef struct job {
  const gcc_program_split *s;
  char base[200];
  int sm;
  gcc_program_compile_fn compile;
  void *user;
  gcc_nvrtc_output *outs;
  gcc_status *status; /* per program */
  gcc_diag *diags;    /* per program */
  pthread_mutex_t lock;
  int next; /* the next program to take */
} job;

static void compile_one(job *j, int p) {
  char name[240];
  snprintf(name, sizeof name, "%s.p%d.cu", j->base, p);
  j->status[p] =
      j->compile(j->user, j->s->programs[p].source, name, j->sm, &j->outs[p], &j->diags[p]);
}

static void *worker(void *arg) {
  job *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->lock);
    int p = j->next < j->s->n_programs ? j->next++ : -1;
    pthread_mutex_unlock(&j->lock);
    if (p < 0)
      return NULL;
    compile_one(j, p);
  }
}

gcc_status gcc_compile_programs(const gcc_program_split *s, const char *program_name, int sm,
                                int threads, gcc_program_compile_fn compile, void *user,
                                gcc_nvrtc_output *outs, int *threads_used, gcc_diag *d) {
  if (!s || !compile || !outs)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "gcc_compile_programs: NULL split, compiler or outputs");
  int n = s->n_programs;
  memset(outs, 0, (size_t)(n > 0 ? n : 0) * sizeof *outs);
  if (threads_used)
    *threads_used = 0;
  if (n <= 0)
    return GCC_OK;
  if (threads <= 0) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    threads = cpus > 0 ? (int)cpus : 1;
  }
  if (threads > n)
    threads = n;
  job j;
  memset(&j, 0, sizeof j);
  j.s = s;
  const char *base = program_name && *program_name ? program_name : "gcc_kernels";
  size_t bl = strlen(base);
  if (bl > 3 && !strcmp(base + bl - 3, ".cu"))
    bl -= 3;
  snprintf(j.base, sizeof j.base, "%.*s", (int)(bl < sizeof j.base ? bl : sizeof j.base - 1), base);
  j.sm = sm;
  j.compile = compile;
  j.user = user;
  j.outs = outs;
  j.status = calloc((size_t)n, sizeof *j.status);
  j.diags = calloc((size_t)n, sizeof *j.diags);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  if (!j.status || !j.diags || !tid) {
    free(j.status);
    free(j.diags);
    free(tid);
    return gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "gcc_compile_programs: out of memory");
  }
  pthread_mutex_init(&j.lock, NULL);
  int started = 0;
  gcc_status st = GCC_OK;
  /* the calling thread is one of the workers */
  for (int t = 1; t < threads; t++) {
    if (pthread_create(&tid[t], NULL, worker, &j) != 0)
      break;
    started++;
  }
  worker(&j);
  for (int t = 1; t <= started; t++)
    pthread_join(tid[t], NULL);
  pthread_mutex_destroy(&j.lock);
  if (threads_used)
    *threads_used = started + 1;
  for (int p = 0; p < n && st == GCC_OK; p++)
    if (j.status[p] != GCC_OK) {
      const gcc_program *pr = &s->programs[p];
      st = gcc_diag_set(d, j.status[p], "%s.p%d.cu (kernels %s .. %s): %s", j.base, p,
                        s->kernel_names[pr->first], s->kernel_names[pr->first + pr->count - 1],
                        j.diags[p].msg);
    }
  free(j.status);
  free(j.diags);
  free(tid);
  return st;
}
