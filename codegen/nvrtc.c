/*
 * nvrtc.c - NVRTC compilation of generated kernels to PTX + cubin.
 *
 * What NVRTC 13.0 gives (checked with a GPU-less machine):
 *  - `-arch=sm_90`: nvrtcGetCUBIN gives the sm_90 cubin AND nvrtcGetPTX gives
 *    the PTX (`.target sm_90`), identical to what `-arch=compute_90` gives;
 *  - `-arch=compute_90`: PTX only (the cubin size is 0);
 *  - `-arch=sm_70`: NVRTC_ERROR_INVALID_OPTION (Volta is gone in CUDA 13).
 * So one compilation per program suffices; we still check that both
 * outputs are there, so that a future NVRTC that stops returning the PTX
 * fails loudly instead of producing an empty cache entry.
 */
#include "codegen/nvrtc.h"
#include "graph/util.h"

#include <nvrtc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Turns a failed NVRTC call into a status whose message names the call, the
 * NVRTC error, the program (when there is one) and our file:line. */
static gcc_status nvrtc_fail(nvrtcResult r, const char *call, const char *file, int line,
                             const char *program, gcc_diag *d) {
  gcc_status s = r == NVRTC_ERROR_OUT_OF_MEMORY ? GCC_ERR_OUT_OF_MEMORY : GCC_ERR_INTERNAL;
  return gcc_diag_set(d, s, "nvrtc: %s%s%s%s failed: %s (%d) at %s:%d", program ? "program '" : "",
                      program ? program : "", program ? "': " : "", call, nvrtcGetErrorString(r),
                      (int)r, file, line);
}

/* Checks an NVRTC call; on failure sets `s` and jumps to `done` (the
 * function's cleanup). Expects locals `s`, `name`, `d` and a label `done`. */
#define NVRTC_CHECK(call)                                                                          \
  do {                                                                                             \
    nvrtcResult nvrtc_r_ = (call);                                                                 \
    if (nvrtc_r_ != NVRTC_SUCCESS) {                                                               \
      s = nvrtc_fail(nvrtc_r_, #call, __FILE__, __LINE__, name, d);                                \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

/* The same for functions with nothing to clean up: returns the status. */
#define NVRTC_CHECK_RETURN(call, d)                                                                \
  do {                                                                                             \
    nvrtcResult nvrtc_r_ = (call);                                                                 \
    if (nvrtc_r_ != NVRTC_SUCCESS)                                                                 \
      return nvrtc_fail(nvrtc_r_, #call, __FILE__, __LINE__, NULL, (d));                           \
  } while (0)

gcc_status gcc_nvrtc_version(int *major, int *minor) {
  int ma = 0, mi = 0;
  NVRTC_CHECK_RETURN(nvrtcVersion(&ma, &mi), NULL);
  if (major)
    *major = ma;
  if (minor)
    *minor = mi;
  return GCC_OK;
}

gcc_status gcc_nvrtc_check_arch(int sm, gcc_diag *d) {
  if (sm <= 0 || sm > 1000)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT,
                        "nvrtc: sm_%d is not a GPU architecture (expected e.g. 80 for sm_80)", sm);
  int n = 0, major = 0, minor = 0;
  NVRTC_CHECK_RETURN(nvrtcVersion(&major, &minor), d);
  NVRTC_CHECK_RETURN(nvrtcGetNumSupportedArchs(&n), d);
  if (n <= 0 || n > 256)
    return gcc_diag_set(d, GCC_ERR_INTERNAL, "nvrtc: nvrtcGetNumSupportedArchs gave %d archs", n);
  int archs[256];
  NVRTC_CHECK_RETURN(nvrtcGetSupportedArchs(archs), d);
  int lo = archs[0], hi = archs[0];
  for (int i = 0; i < n; i++) {
    if (archs[i] == sm)
      return GCC_OK;
    lo = archs[i] < lo ? archs[i] : lo;
    hi = archs[i] > hi ? archs[i] : hi;
  }
  char list[1024];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; i < n && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, "%ssm_%d", i ? " " : "", archs[i]);
    if (w < 0)
      break;
    used += (size_t)w;
  }
  const char *why = sm < lo   ? "no longer supported: older than the oldest arch it targets"
                    : sm > hi ? "too new: newer than the newest arch it targets"
                              : "not an arch it targets";
  return gcc_diag_set(d, GCC_ERR_UNSUPPORTED, "nvrtc: sm_%d is %s (NVRTC %d.%d supports: %s)", sm,
                      why, major, minor, list);
}

void gcc_nvrtc_options(int sm, gcc_nvrtc_opts *o) {
  memset(o, 0, sizeof *o);
  snprintf(o->arch, sizeof o->arch, "-arch=sm_%d", sm);
  o->v[o->n++] = o->arch;
  o->v[o->n++] = "--std=c++17";
  /* line tables in the cubin and .loc in the PTX: profilers and
   * compute-sanitizer can point at generated source lines; no effect on
   * the code itself */
  o->v[o->n++] = "-lineinfo";
  /* bit-exact with the CPU backend: no a*b+c contraction into FMA (gcc does
   * not contract in ISO C mode). --use_fast_math is never passed either. */
  o->v[o->n++] = "--fmad=false";
  const char *cuda = getenv("CUDA_HOME");
  snprintf(o->include, sizeof o->include, "--include-path=%s/include",
           cuda && *cuda ? cuda : "/usr/local/cuda");
  o->v[o->n++] = o->include;
}

/* ---- error messages ----------------------------------------------------- */

typedef struct msgbuf {
  char *p;
  size_t cap, len;
} msgbuf;

static void msg_add(msgbuf *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void msg_add(msgbuf *m, const char *fmt, ...) {
  if (m->len + 1 >= m->cap)
    return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(m->p + m->len, m->cap - m->len, fmt, ap);
  va_end(ap);
  if (w > 0)
    m->len = m->len + (size_t)w < m->cap ? m->len + (size_t)w : m->cap - 1;
}

/* Appends line `ln` (1-based) of `src` as "  ln | text", if it exists. */
static void add_source_line(msgbuf *m, const char *src, long ln) {
  const char *p = src;
  for (long i = 1; i < ln && p; i++) {
    p = strchr(p, '\n');
    if (p)
      p++;
  }
  if (!p || !*p)
    return;
  const char *e = strchr(p, '\n');
  int len = (int)(e ? e - p : (long)strlen(p));
  if (len > 200)
    len = 200;
  msg_add(m, "  %5ld | %.*s\n", ln, len, p);
}

/* N of a log line "<name>(N): ..." starting at p, or 0 */
static long log_line_number(const char *p, const char *name, size_t nl) {
  if (strncmp(p, name, nl) != 0 || p[nl] != '(')
    return 0;
  const char *digits = p + nl + 1;
  size_t n = strspn(digits, "0123456789");
  char num[24];
  int64_t ln;
  if (n == 0 || n >= sizeof num || digits[n] != ')')
    return 0;
  memcpy(num, digits, n);
  num[n] = '\0';
  return gcc_parse_i64(num, 1, INT32_MAX, &ln) ? (long)ln : 0;
}

/* The message for a failed nvrtcCompileProgram: program, arch, the source
 * lines the log points at ("NAME(LINE): error ..."), then the log. */
static gcc_status compile_error(nvrtcResult r, const char *source, const char *name, int sm,
                                const char *log, gcc_diag *d) {
  char buf[sizeof d->msg];
  msgbuf m = {buf, sizeof buf, 0};
  buf[0] = '\0';
  msg_add(&m,
          "nvrtc: program '%s' failed to compile for sm_%d: %s (generated code that does not "
          "compile is a gcc-train bug)\n",
          name, sm, nvrtcGetErrorString(r));
  long seen[8];
  int n_seen = 0;
  size_t nl = strlen(name);
  for (const char *p = log; p && *p && n_seen < 8;) {
    const char *eol = strchr(p, '\n');
    long ln = log_line_number(p, name, nl);
    if (ln > 0) {
      int dup = 0;
      for (int i = 0; i < n_seen; i++)
        dup |= seen[i] == ln;
      if (!dup) {
        if (n_seen == 0)
          msg_add(&m, "source lines the log points at:\n");
        seen[n_seen++] = ln;
        add_source_line(&m, source, ln);
      }
    }
    p = eol ? eol + 1 : NULL;
  }
  msg_add(&m, "NVRTC log:\n%s", log && *log ? log : "(empty)\n");
  return gcc_diag_set(d, GCC_ERR_INTERNAL, "%s", buf);
}

/* ---- compile ------------------------------------------------------------ */

gcc_status gcc_nvrtc_compile(const char *source, const char *program_name, int sm,
                             gcc_nvrtc_output *out, gcc_diag *d) {
  if (!out)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "nvrtc: gcc_nvrtc_compile: out is NULL");
  memset(out, 0, sizeof *out);
  const char *name = program_name && *program_name ? program_name : GCC_NVRTC_DEFAULT_PROGRAM_NAME;
  if (!source)
    return gcc_diag_set(d, GCC_ERR_INVALID_ARGUMENT, "nvrtc: program '%s': source is NULL", name);
  GCC_TRY(gcc_nvrtc_check_arch(sm, d));

  gcc_nvrtc_opts o;
  gcc_nvrtc_options(sm, &o);
  gcc_status s = GCC_OK;
  nvrtcProgram prog = NULL;
  size_t log_size = 0, ptx_size = 0, cubin_size = 0;
  double t0 = now_seconds();

  NVRTC_CHECK(nvrtcCreateProgram(&prog, source, name, 0, NULL, NULL));
  nvrtcResult cr = nvrtcCompileProgram(prog, o.n, o.v);
  /* the log, whatever the outcome: warnings on success, errors on failure */
  NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &log_size));
  out->log = malloc(log_size + 1);
  if (!out->log) {
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY, "nvrtc: program '%s': out of memory for the log",
                     name);
    goto done;
  }
  out->log[0] = '\0';
  if (log_size > 0)
    NVRTC_CHECK(nvrtcGetProgramLog(prog, out->log));
  out->log[log_size] = '\0';
  if (cr == NVRTC_ERROR_OUT_OF_MEMORY) {
    s = nvrtc_fail(cr, "nvrtcCompileProgram(prog, o.n, o.v)", __FILE__, __LINE__, name, d);
    goto done;
  }
  if (cr != NVRTC_SUCCESS) {
    s = compile_error(cr, source, name, sm, out->log, d);
    goto done;
  }

  NVRTC_CHECK(nvrtcGetPTXSize(prog, &ptx_size));
  NVRTC_CHECK(nvrtcGetCUBINSize(prog, &cubin_size));
  if (ptx_size <= 1 || cubin_size == 0) {
    s = gcc_diag_set(d, GCC_ERR_INTERNAL,
                     "nvrtc: program '%s': NVRTC produced %zu bytes of PTX and %zu bytes of "
                     "cubin for -arch=sm_%d (both are expected from one compilation)",
                     name, ptx_size, cubin_size, sm);
    goto done;
  }
  out->ptx = malloc(ptx_size + 1);
  out->cubin = malloc(cubin_size);
  if (!out->ptx || !out->cubin) {
    s = gcc_diag_set(d, GCC_ERR_OUT_OF_MEMORY,
                     "nvrtc: program '%s': out of memory for %zu bytes of PTX and %zu of cubin",
                     name, ptx_size, cubin_size);
    goto done;
  }
  NVRTC_CHECK(nvrtcGetPTX(prog, out->ptx));
  out->ptx[ptx_size] = '\0'; /* NVRTC's size counts a NUL already */
  out->ptx_size = strlen(out->ptx);
  NVRTC_CHECK(nvrtcGetCUBIN(prog, (char *)out->cubin));
  out->cubin_size = cubin_size;

done:
  if (prog) {
    nvrtcResult dr = nvrtcDestroyProgram(&prog);
    if (dr != NVRTC_SUCCESS && s == GCC_OK)
      s = nvrtc_fail(dr, "nvrtcDestroyProgram(&prog)", __FILE__, __LINE__, name, d);
  }
  if (s != GCC_OK) {
    free(out->ptx);
    free(out->cubin);
    out->ptx = NULL;
    out->cubin = NULL;
    out->ptx_size = out->cubin_size = 0;
  }
  out->seconds = now_seconds() - t0;
  return s;
}
