/*
 * cuda_host_shim.h - compiles generated CUDA C (codegen/emit.c) as host
 * C++17, so the tests run the very source NVRTC compiles on the CPU and
 * compare it with the CPU backend (tests/kernel_emulation.h).
 *
 *   g++ -std=c++17 -O1 -fPIC -shared -fno-strict-aliasing -pthread \
 *       -include tests/cuda_host_shim.h -DGCC_HOST_EMULATION kernels.cu.cc -o k.so
 *
 * Include it once per translation unit (it defines the emulator's state
 * there). Not used by the library itself, never by NVRTC.
 *
 * ---- What the emitter prints (the contract) --------------------------------
 * After each kernel, inside `#ifdef GCC_HOST_EMULATION`:
 *
 *   extern "C" void <kernel>_launch(unsigned grid, unsigned block, void **args) {
 *     GCC_EMU_LAUNCH(<kernel>, grid, block, *(T0 *)args[0], *(T1 *)args[1], ...);
 *   }
 *
 * where Ti is the C type of parameter i exactly as in the kernel's
 * signature without __restrict__ (`const float *`, `float *`, `long long`,
 * `int`, `int *`, ...) and args[i] points at the argument's value, as the
 * `kernelParams` of cudaLaunchKernel / cuLaunchKernel. Every argument is
 * read once, on the launching thread, before any emulated thread starts.
 * GCC_EMU_LAUNCH returns when every block has run.
 *
 * ---- How a launch runs -------------------------------------------------------
 * `grid` x `block` emulated threads (1-D: .y/.z of the built-ins are 0 / 1),
 * all on the launching host thread: the threads of a block are coroutines
 * (ucontext: makecontext / swapcontext), each with its own 64 KiB stack
 * (guard page below it) and so its own locals across barriers. Blocks run
 * one after another. Within a block the scheduler runs every ready thread,
 * in threadIdx order, until it returns or reaches __syncthreads(); when no
 * thread is ready, the barrier opens for all the waiting ones. That is a
 * real barrier: any kernel whose barriers are correct CUDA (reached by
 * every thread of the block) gets its CUDA semantics, whatever it does
 * between them. A thread that returned no longer counts for the block's
 * later barriers (what the hardware does for exited threads), so
 * `if (blockIdx.x != 0) return;` before a barrier is fine; a block whose
 * threads passed different numbers of barriers is counted in
 * gcc_emu_barrier_mismatches() (divergent barriers: a bug on a GPU).
 * (Real pthreads + a barrier per block are also correct, but 256 threads
 * meeting at a condition variable per block cost ~4 ms a block on 2 cores:
 * 9 s for the MLP's optimizer grid, against 0.3 s for coroutines.)
 *
 * ---- Restrictions ------------------------------------------------------------
 *  - __shared__ is `static`: one instance per kernel per loaded module. That
 *    is per-block storage only because blocks run one after another; it
 *    would be shared by two launches running at the same time, so launches
 *    are serialized by a mutex (one per module, as the statics are):
 *    launching from several host threads is correct but not concurrent.
 *    Shared memory starts zeroed once (not per block); CUDA leaves it
 *    undefined anyway.
 *  - a data race between threads of a block is resolved in one fixed order
 *    (threads run one at a time between barriers), so races are not found;
 *    nor is a missing __syncthreads() between a write and another thread's
 *    read when threadIdx order happens to be the order the kernel needs:
 *    gcc_emu_set_thread_order(1) runs them in the reverse order, and the
 *    tests require the same bits both ways.
 *  - a thread's stack is 64 KiB: no large local arrays.
 *  - no dynamic shared memory (`extern __shared__ T x[]`), no warp-level
 *    primitives (__shfl*, __ballot, __syncwarp, cooperative groups),
 *    no textures, no streams/events: launches are synchronous.
 *  - 1-D grids and blocks; block <= 1024, grid >= 1 (else the launch does
 *    nothing and gcc_emu_last_error() says why).
 *  - float arithmetic is the host's (SSE, no FMA contraction on baseline
 *    x86-64), so results equal the CPU backend where the operation order is
 *    the same; a GPU may contract a*b+c into an FMA.
 *  - no min()/max() overloads (use fminf/fmaxf or explicit ?:).
 *  - atomics are provided (atomicAdd/atomicMax/atomicMin/atomicExch/
 *    atomicCAS) as host atomics, and __threadfence() as a full fence; the
 *    generated code uses atomicMin for the loss kernels' bad-label flag and
 *    atomicExch / atomicAdd for the loss-scaling check's flag and block
 *    counter (an OR and a count: their order does not change the result;
 *    reductions of values use no atomics).
 */
#ifndef GCC_CODEGEN_CUDA_HOST_SHIM_H
#define GCC_CODEGEN_CUDA_HOST_SHIM_H

#ifndef __cplusplus
#error "cuda_host_shim.h: compile generated kernels as C++17"
#endif

#include <math.h>
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmath>
#include <tuple>
#include <utility>

/* ---- qualifiers ---- */
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__    __attribute__((noinline))
#define __launch_bounds__(...)
#define __shared__ static
/* __restrict__ is a GNU C++ keyword already. */

/* ---- vector types and built-ins ---- */
struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct __attribute__((aligned(16), may_alias)) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(8), may_alias)) float2 {
  float x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) {
  return float4{x, y, z, w};
}
static inline float2 make_float2(float x, float y) {
  return float2{x, y};
}

/* ---- cuda_bf16.h / cuda_fp16.h: the 16-bit storage types ----
 * The conversions the generated code uses, written independently of the
 * library's graph/half.h (round to nearest even by rint() on an exactly
 * scaled value, rather than bit manipulation), so that a test comparing
 * host-emulated kernels with the CPU backend checks one against the other.
 * NaN converts to CUDA's canonical NaN (0x7fff / 0x7fff). */
struct __nv_bfloat16 {
  unsigned short x;
};
struct __half {
  unsigned short x;
};

static inline unsigned gcc_shim_bits(float f) {
  unsigned u;
  memcpy(&u, &f, sizeof u);
  return u;
}

/* x rounded to a float with `mant` explicit mantissa bits whose normal
 * range starts at 2^emin (below it: multiples of 2^(emin - mant)), ties to
 * even; as a double (exact). */
static inline double gcc_shim_round(double x, int mant, int emin) {
  double a = fabs(x);
  if (a < ldexp(1.0, emin))
    return copysign(rint(ldexp(a, mant - emin)) * ldexp(1.0, emin - mant), x);
  int e;
  double f = frexp(a, &e); /* a = f 2^e, f in [0.5, 1) */
  return copysign(ldexp(rint(ldexp(f, mant + 1)), e - mant - 1), x);
}

static inline float __bfloat162float(__nv_bfloat16 h) {
  unsigned u = (unsigned)h.x << 16;
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  if (isnan(f))
    return __nv_bfloat16{0x7fff};
  float r = (float)gcc_shim_round(f, 7, -126); /* past FLT_MAX: inf */
  return __nv_bfloat16{(unsigned short)(gcc_shim_bits(r) >> 16)};
}

static inline float __half2float(__half h) {
  int e = (h.x >> 10) & 31, m = h.x & 1023;
  double v = e == 0    ? ldexp((double)m, -24)
             : e == 31 ? (m ? NAN : INFINITY)
                       : ldexp((double)(m + 1024), e - 25);
  return (float)((h.x & 0x8000) ? -v : v);
}

static inline __half __float2half_rn(float f) {
  if (isnan(f))
    return __half{0x7fff};
  double r = gcc_shim_round(f, 10, -14), a = fabs(r);
  unsigned short sign = signbit(f) ? 0x8000 : 0;
  if (a > 65504.0)
    return __half{(unsigned short)(sign | 0x7c00)};
  if (a < ldexp(1.0, -14))
    return __half{(unsigned short)(sign | (unsigned)ldexp(a, 24))};
  int e;
  double fr = frexp(a, &e); /* a = fr 2^e: biased exponent e - 1 + 15 */
  unsigned m = (unsigned)ldexp(fr, 11) - 1024;
  return __half{(unsigned short)(sign | (unsigned)(e + 14) << 10 | m)};
}

/* Per emulated thread: set by the scheduler as it resumes each one. Plain
 * statics, not thread_local: a module's launches run one at a time under
 * g_launch_mu, all on the launching host thread, and a module with TLS takes
 * a slot in every thread's DTV; with hundreds of modules loaded
 * (onnx_conformance_test) LeakSanitizer's exit-time TLS scan crashed its
 * tracer ("Tracer caught signal 11", about 1 asan run in 2). */
static uint3 threadIdx;
static uint3 blockIdx;
static dim3 blockDim;
static dim3 gridDim;

/* ---- device math the generated code may use ---- */
/* glibc declares __expf/__logf itself: map the CUDA intrinsics by name */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b) {
  return a / b;
}
static inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
static inline float __saturatef(float x) {
  return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
}
static inline float __int_as_float(int x) {
  float f;
  __builtin_memcpy(&f, &x, sizeof f);
  return f;
}

/* ---- atomics (host) ---- */
static inline int atomicAdd(int *a, int v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline unsigned atomicAdd(unsigned *a, unsigned v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline unsigned long long atomicAdd(unsigned long long *a, unsigned long long v) {
  return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);
}
static inline float atomicAdd(float *a, float v) {
  float old = *a;
  for (;;) {
    float nv = old + v;
    if (__atomic_compare_exchange(a, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return old;
  }
}
static inline double atomicAdd(double *a, double v) {
  double old = *a;
  for (;;) {
    double nv = old + v;
    if (__atomic_compare_exchange(a, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
      return old;
  }
}
static inline int atomicMax(int *a, int v) {
  int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  while (old < v &&
         !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
static inline int atomicMin(int *a, int v) {
  int old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
  while (old > v &&
         !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
/* blocks run one after another on one host thread: a full fence is more
 * than enough for a __threadfence() between a block's writes and its atomics */
static inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
static inline int atomicExch(int *a, int v) {
  return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);
}
static inline int atomicCAS(int *a, int cmp, int v) {
  __atomic_compare_exchange_n(a, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}

/* ---- the emulator ---- */
namespace gcc_emu {

enum ThreadState { READY = 0, WAITING = 1, DONE = 2 };

/* One launch: the block's emulated threads as coroutines on this host
 * thread. */
struct Launch {
  ucontext_t sched;        /* the scheduler (the launching thread) */
  ucontext_t *ctx;         /* per emulated thread */
  unsigned char *state;    /* ThreadState per emulated thread */
  unsigned long *barriers; /* __syncthreads passed, per emulated thread, this block */
  unsigned cur;            /* the running emulated thread */
  void (*body)(void *);
  void *closure;
};

static const size_t kStackBytes = 64 * 1024; /* per emulated thread, plus a guard page */

static Launch *t_launch; /* the running launch (under g_launch_mu) */

static pthread_mutex_t g_launch_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_error[256];
static unsigned long g_mismatches; /* of the last launch */
static int g_reversed;             /* run ready threads in descending threadIdx order */

__attribute__((unused)) static void thread_entry() {
  Launch *l = t_launch;
  l->body(l->closure);
  l->state[l->cur] = DONE; /* returns to l->sched through uc_link */
}

static inline void syncthreads() {
  Launch *l = t_launch;
  if (!l)
    return; /* outside a launch: nothing to wait for */
  unsigned me = l->cur;
  l->state[me] = WAITING;
  l->barriers[me]++;
  swapcontext(&l->ctx[me], &l->sched);
}

/* getcontext / swapcontext return twice: kept out of run()'s frame. */
__attribute__((noinline, unused)) static void prepare_thread(Launch *l, unsigned t, void *sp,
                                                             size_t bytes) {
  getcontext(&l->ctx[t]);
  l->ctx[t].uc_stack.ss_sp = sp;
  l->ctx[t].uc_stack.ss_size = bytes;
  l->ctx[t].uc_link = &l->sched;
  makecontext(&l->ctx[t], thread_entry, 0);
  l->state[t] = READY;
  l->barriers[t] = 0;
}

__attribute__((noinline, unused)) static void resume_thread(Launch *l, unsigned t) {
  l->cur = t;
  threadIdx = uint3{t, 0, 0};
  swapcontext(&l->sched, &l->ctx[t]);
}

template <typename F> static void call_closure(void *c) {
  (*static_cast<F *>(c))();
}

template <typename F> static void run(unsigned grid, unsigned block, F &f) {
  pthread_mutex_lock(&g_launch_mu);
  g_error[0] = '\0';
  g_mismatches = 0;
  if (grid == 0 || block == 0 || block > 1024) {
    snprintf(g_error, sizeof g_error, "invalid launch configuration: grid %u, block %u", grid,
             block);
    pthread_mutex_unlock(&g_launch_mu);
    return;
  }
  long page = sysconf(_SC_PAGESIZE);
  size_t per = kStackBytes + (size_t)page;
  size_t total = per * block;
  unsigned char *stacks = (unsigned char *)mmap(nullptr, total, PROT_READ | PROT_WRITE,
                                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Launch l;
  l.ctx = new ucontext_t[block];
  l.state = new unsigned char[block];
  l.barriers = new unsigned long[block];
  l.body = &call_closure<F>;
  l.closure = &f;
  if (stacks == MAP_FAILED) {
    snprintf(g_error, sizeof g_error, "cannot map %zu bytes of emulated thread stacks", total);
  } else {
    for (unsigned t = 0; t < block; t++)
      mprotect(stacks + per * t, (size_t)page, PROT_NONE); /* overflow faults */
    Launch *saved = t_launch;
    t_launch = &l;
    gridDim = dim3(grid, 1, 1);
    blockDim = dim3(block, 1, 1);
    for (unsigned b = 0; b < grid; b++) {
      blockIdx = uint3{b, 0, 0};
      for (unsigned t = 0; t < block; t++)
        prepare_thread(&l, t, stacks + per * t + page, kStackBytes);
      /* Run every ready thread until it returns or reaches a barrier; when
       * none is ready, the barrier opens for all waiting ones (threads that
       * returned no longer count, as on the hardware). */
      for (;;) {
        for (unsigned i = 0; i < block; i++) {
          unsigned t = g_reversed ? block - 1 - i : i;
          if (l.state[t] == READY)
            resume_thread(&l, t);
        }
        unsigned waiting = 0;
        for (unsigned t = 0; t < block; t++)
          if (l.state[t] == WAITING) {
            l.state[t] = READY;
            waiting++;
          }
        if (!waiting)
          break;
      }
      unsigned long lo = l.barriers[0], hi = l.barriers[0];
      for (unsigned t = 1; t < block; t++) {
        lo = l.barriers[t] < lo ? l.barriers[t] : lo;
        hi = l.barriers[t] > hi ? l.barriers[t] : hi;
      }
      if (lo != hi)
        g_mismatches++;
    }
    t_launch = saved;
    munmap(stacks, total);
  }
  delete[] l.ctx;
  delete[] l.state;
  delete[] l.barriers;
  pthread_mutex_unlock(&g_launch_mu);
}

/* GCC_EMU_LAUNCH: converts every argument to the kernel's parameter type
 * once, then runs the grid. */
template <typename... P, typename... A>
static void launch(unsigned grid, unsigned block, void (*kernel)(P...), A &&...a) {
  static_assert(sizeof...(P) == sizeof...(A), "GCC_EMU_LAUNCH: wrong number of arguments");
  std::tuple<typename std::decay<P>::type...> params(std::forward<A>(a)...);
  auto body = [&]() { std::apply(kernel, params); };
  run(grid, block, body);
}

} // namespace gcc_emu

static inline void __syncthreads() {
  gcc_emu::syncthreads();
}

#define GCC_EMU_LAUNCH(kernel, grid, block, ...)                                                   \
  ::gcc_emu::launch((unsigned)(grid), (unsigned)(block), kernel, __VA_ARGS__)

/* What the harness asks the loaded module after a launch. */
extern "C" __attribute__((visibility("default"), used)) const char *gcc_emu_last_error(void) {
  return gcc_emu::g_error;
}
extern "C" __attribute__((visibility("default"), used)) unsigned long
gcc_emu_barrier_mismatches(void) {
  return gcc_emu::g_mismatches;
}
/* 1: later launches run a block's ready threads in descending threadIdx
 * order. A correct kernel gives the same bits both ways; one that needs a
 * __syncthreads() it lacks (or races) usually does not. */
extern "C" __attribute__((visibility("default"), used)) void
gcc_emu_set_thread_order(int reversed) {
  pthread_mutex_lock(&gcc_emu::g_launch_mu);
  gcc_emu::g_reversed = reversed;
  pthread_mutex_unlock(&gcc_emu::g_launch_mu);
}

#endif /* GCC_CODEGEN_CUDA_HOST_SHIM_H */
