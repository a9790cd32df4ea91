// batchnorm_kernels_test: the generated BatchNormalization (training and
// evaluation forms) and BatchNormGrad kernels (codegen/emit_batchnorm.c),
// host-emulated through tests/cuda_host_shim.h, against float64 arithmetic
// written out here (nn.BatchNorm2d's formulas: batch mean, biased variance
// for normalizing, unbiased for the running variance).
//
// The kernels reduce in float32 over many blocks per channel (Welford per
// lane, a fixed pairwise tree over 256 lanes, the P per-block partials
// merged in index order), so they are compared within a bound derived from
// that reduction's depth: a float32 sum of terms t_i computed along a path of
// K = L + log2(256) + P + 2 roundings (L the terms per lane) is off by at
// most K u sum |t_i| to first order (Higham, Accuracy and Stability, 4.2;
// u = 2^-24), and Welford's mean and M2 by the same order (Chan, Golub and
// LeVeque 1983). Every bound below says what it covers next to its
// assertion. Bitwise equality with the CPU backend is not asked (its float64
// serial sums give other bits); bitwise run-to-run determinism is: two runs,
// and runs with other grids, blocks and the reversed thread order, store the
// same bits.
#include <gtest/gtest.h>
#include <math.h>
#include <string.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/lowering.h"
#include "graph/builder.h"
#include "graph/ops.h"
#include "runtime/compile.h"
#include "tests/kernel_emulation.h"
#include "tests/test_graphs.h"

using gcc_test::FinishInlineTraining; // tests/test_graphs.h
using gcc_test::Opt;

namespace {

using gcc_emu_test::EmulatedModule;

const double kU = 1.0 / 16777216.0; // float32's unit roundoff, 2^-24

// x [N, C, H, W] + a (C, 1, 1) -> BatchNormalization (running statistics as
// state) -> MSE with t; SGD. The Add gives X a gradient (BatchNormGrad's dX).
gcc_graph *BnModel(int64_t c, int64_t h, int64_t w, int64_t batch) {
  gcc_builder *b = gcc_builder_new("bn_kernels", 5);
  int64_t xd[4] = {GCC_BATCH_DIM, c, h, w}, ad[3] = {c, 1, 1}, cd[1] = {c};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 4, xd);
  int t = gcc_build_input(b, "t", GCC_DT_FLOAT32, 4, xd);
  std::vector<float> a(c), scale(c), shift(c), mean(c), var(c);
  for (int64_t i = 0; i < c; i++) {
    a[i] = 0.1f * (float)i;
    scale[i] = 0.5f + 0.25f * (float)(i % 3);
    shift[i] = 0.1f * (float)(i % 4) - 0.15f;
    mean[i] = 0.05f * (float)i;
    var[i] = 1.0f + 0.5f * (float)(i % 2);
  }
  int add_in[2] = {x, gcc_build_param(b, "a", 3, ad, a.data())};
  int xa = gcc_build_op(b, GCC_OP_ADD, "add", "add.out", add_in, 2);
  int in[5] = {xa, gcc_build_param(b, "bn.scale", 1, cd, scale.data()),
               gcc_build_param(b, "bn.bias", 1, cd, shift.data()),
               gcc_build_param(b, "bn.running_mean", 1, cd, mean.data()),
               gcc_build_param(b, "bn.running_var", 1, cd, var.data())};
  int bn = gcc_build_op(b, GCC_OP_BATCH_NORM, "bn", "bn.out", in, 5);
  int loss = gcc_build_mse(b, "loss", bn, t);
  gcc_build_output(b, loss);
  gcc_graph *g = FinishInlineTraining(b, "loss", nullptr, "x", "t", Opt(GCC_OPT_SGD, 0.1f), batch);
  if (g)
    for (int v = 0; v < g->n_values; v++)
      g->values[v].state |= strncmp(g->values[v].name, "bn.running_", 11) == 0;
  return g;
}

struct Compiled {
  gcc_graph *g = nullptr;
  gcc_mem_plan mem{};
  gcc_kernel_set ks{};
  ~Compiled() {
    gcc_kernel_set_free(&ks);
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
};

bool CompileFor(const gcc_graph *model, gcc_mode mode, int64_t batch, int sm_count, Compiled *c,
                std::string *err) {
  gcc_options o{};
  o.mode = mode;
  o.batch_size = batch;
  o.opt = model->training.opt;
  o.device = GCC_DEV_CUDA(0);
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  FILE *sink = fopen("/dev/null", "w");
  o.warn_file = sink;
  gcc_diag d{};
  gcc_status s = gcc_compile_graph(model, &o, &c->g, &c->mem, &d);
  fclose(sink);
  if (s == GCC_OK)
    s = gcc_codegen_emit(c->g, GCC_DEV_CUDA(0), sm_count, &c->ks, &d);
  if (s != GCC_OK)
    *err = d.msg;
  return s == GCC_OK;
}

// The data of one group's run: every INPUT / OUTPUT value and the scratch.
using Bufs = std::map<int, std::vector<float>>;

// Launches the kernels [k0, k1] of a group in order on `b` (running
// statistics updated in place, as on the device); grid / block 0: the
// kernel's own.
void RunGroup(const EmulatedModule &mod, const gcc_kernel_set &ks, int k0, int k1, Bufs *b,
              unsigned grid, unsigned block, bool reversed) {
  size_t scratch = 0;
  for (int k = k0; k <= k1; k++)
    scratch = std::max(scratch, ks.kernels[k].scratch_bytes);
  std::vector<float> sc(scratch / 4 + 1, NAN); // poison: a partial read before it is written
  mod.SetReversedThreadOrder(reversed);
  for (int k = k0; k <= k1; k++) {
    const gcc_kernel_info &ki = ks.kernels[k];
    std::vector<void *> ptrs(ki.n_args), argv(ki.n_args);
    for (int a = 0; a < ki.n_args; a++) {
      const gcc_kernel_arg &arg = ki.args[a];
      if (arg.kind == GCC_KARG_SCRATCH) {
        ptrs[a] = sc.data();
      } else {
        ASSERT_TRUE(arg.kind == GCC_KARG_INPUT || arg.kind == GCC_KARG_OUTPUT) << arg.name;
        ASSERT_TRUE(b->count(arg.value)) << arg.name;
        ptrs[a] = (*b)[arg.value].data();
      }
      argv[a] = &ptrs[a];
    }
    std::string err;
    ASSERT_TRUE(mod.Launch(ki.name, grid ? grid : (unsigned)ki.grid_dim,
                           block ? block : (unsigned)ki.block_dim, argv.data(), &err))
        << ki.name << ": " << err;
    EXPECT_EQ(mod.BarrierMismatches(), 0u) << ki.name;
  }
  mod.SetReversedThreadOrder(false);
}

bool SameBits(const Bufs &a, const Bufs &b) {
  for (auto &kv : a)
    if (memcmp(kv.second.data(), b.at(kv.first).data(), kv.second.size() * 4) != 0)
      return false;
  return true;
}

// The float64 reference of a group's node on `in`; `tol` gets each output
// element's bound (derived in the comments), `ref` the value.
struct Ref {
  std::map<int, std::vector<double>> val, tol;
};

struct Geo {
  int64_t n, c, s, m;
};

Geo GeoOf(const gcc_graph *g, int xv) {
  const gcc_shape &X = g->values[xv].shape;
  Geo q{X.dims[0], X.dims[1], 1, 0};
  for (int k = 2; k < X.ndim; k++)
    q.s *= X.dims[k];
  q.m = q.n * q.s;
  return q;
}

// K: the roundings along one term's path in the kernels' sums (lane, tree
// of 8 levels, P partials, and the final division / square root).
double DepthK(const Geo &q, int64_t p) {
  int64_t per_lane = (q.m + p * 256 - 1) / (p * 256);
  return (double)(per_lane + 8 + p + 2);
}

// the chunks per channel the kernels use: from the "_stats" / "_sums" kernel's
// work items (C * P work items of 256 lanes)
int64_t ChunksOf(const gcc_kernel_info &k, int64_t c) {
  return k.work_items / 256 / c;
}

void Stats(const std::vector<float> &x, const Geo &q, int64_t c, double *mean, double *var,
           double *maxabs, double *maxdev) {
  double s = 0, v = 0;
  *maxabs = 0;
  for (int64_t b = 0; b < q.n; b++)
    for (int64_t i = 0; i < q.s; i++) {
      double t = x[(size_t)((b * q.c + c) * q.s + i)];
      s += t;
      *maxabs = std::max(*maxabs, fabs(t));
    }
  *mean = s / (double)q.m;
  *maxdev = 0;
  for (int64_t b = 0; b < q.n; b++)
    for (int64_t i = 0; i < q.s; i++) {
      double t = x[(size_t)((b * q.c + c) * q.s + i)] - *mean;
      v += t * t;
      *maxdev = std::max(*maxdev, fabs(t));
    }
  *var = v / (double)q.m;
}

void ReferenceBn(const gcc_node *nd, const Geo &q, int64_t p, const Bufs &in, Ref *r) {
  const std::vector<float> &x = in.at(nd->inputs[0]), &sc = in.at(nd->inputs[1]),
                           &bi = in.at(nd->inputs[2]), &rm = in.at(nd->inputs[3]),
                           &rv = in.at(nd->inputs[4]);
  const bool training = nd->av[BN_TRAINING].i != 0;
  const double eps = nd->av[BN_EPSILON].f, mom = nd->av[BN_MOMENTUM].f, K = DepthK(q, p);
  std::vector<double> &y = r->val[nd->outputs[0]], &ty = r->tol[nd->outputs[0]];
  y.assign((size_t)(q.n * q.c * q.s), 0.0);
  ty.assign(y.size(), 0.0);
  std::vector<double> nrm(rm.begin(), rm.end()), nrv(rv.begin(), rv.end()), tm(q.c), tv(q.c);
  for (int64_t c = 0; c < q.c; c++) {
    double mean = rm[c], var = rv[c], maxabs = 0, maxdev = 0, dmean = 0, dvar = 0;
    if (training) {
      Stats(x, q, c, &mean, &var, &maxabs, &maxdev);
      // Welford in float32 along K roundings: |d mean| <= 2 K u max|x|,
      // |d var| <= 3 K u max (x - mean)^2 (first order, Chan-Golub-LeVeque)
      dmean = 2 * K * kU * maxabs;
      dvar = 3 * K * kU * maxdev * maxdev;
      nrm[c] = mom * rm[c] + (1 - mom) * mean;
      nrv[c] = mom * rv[c] + (1 - mom) * var * (double)q.m / (double)(q.m - 1);
      // the running statistics: the statistics' error, then 4 roundings of the update
      tm[c] = (1 - mom) * dmean + 4 * kU * (fabs(nrm[c]) + fabs(mom * rm[c]));
      tv[c] = (1 - mom) * dvar * 1.01 + 4 * kU * (fabs(nrv[c]) + fabs(mom * rv[c]));
    }
    const double invstd = 1.0 / sqrt(var + eps), k = sc[c] * invstd, b0 = bi[c] - mean * k;
    for (int64_t b = 0; b < q.n; b++)
      for (int64_t i = 0; i < q.s; i++) {
        size_t at = (size_t)((b * q.c + c) * q.s + i);
        y[at] = x[at] * k + b0;
        // y = x k + (B - mean k): the statistics' errors through k and b0
        // (d k = k d var / (2 (var + eps))), and 6 float32 roundings of k, b0
        // and the multiply-add, each of at most the largest term
        double dk = fabs(k) * dvar / (2 * (var + eps));
        ty[at] = fabs(k) * dmean + dk * (fabs(x[at]) + fabs(mean)) +
                 6 * kU * (fabs(x[at] * k) + fabs(mean * k) + fabs(bi[c]));
      }
  }
  if (training) {
    r->val[nd->inputs[3]] = nrm;
    r->val[nd->inputs[4]] = nrv;
    r->tol[nd->inputs[3]] = tm;
    r->tol[nd->inputs[4]] = tv;
  }
}

void ReferenceBnGrad(const gcc_node *nd, const Geo &q, int64_t p, const Bufs &in, Ref *r) {
  const std::vector<float> &dy = in.at(nd->inputs[0]), &x = in.at(nd->inputs[1]),
                           &sc = in.at(nd->inputs[2]);
  const double eps = nd->av[BN_GRAD_EPSILON].f, K = DepthK(q, p);
  const int64_t which = nd->av[BN_GRAD_OUTPUT].i;
  std::vector<double> &o = r->val[nd->outputs[0]], &to = r->tol[nd->outputs[0]];
  o.assign(which == 0 ? (size_t)(q.n * q.c * q.s) : (size_t)q.c, 0.0);
  to.assign(o.size(), 0.0);
  for (int64_t c = 0; c < q.c; c++) {
    double mean, var, maxabs, maxdev;
    Stats(x, q, c, &mean, &var, &maxabs, &maxdev);
    const double invstd = 1.0 / sqrt(var + eps);
    // the statistics' errors (as in ReferenceBn) and what they do to xhat:
    // |d xhat| <= invstd (d mean + |x - mean| d var / (2 (var + eps)))
    const double dmean = 2 * K * kU * maxabs, dvar = 3 * K * kU * maxdev * maxdev;
    double db = 0, ds = 0, adb = 0, ads = 0, maxg = 0, maxxh = 0;
    for (int64_t b = 0; b < q.n; b++)
      for (int64_t i = 0; i < q.s; i++) {
        size_t at = (size_t)((b * q.c + c) * q.s + i);
        double xh = (x[at] - mean) * invstd;
        db += dy[at];
        ds += dy[at] * xh;
        adb += fabs(dy[at]);
        ads += fabs(dy[at] * xh);
        maxg = std::max(maxg, fabs((double)dy[at]));
        maxxh = std::max(maxxh, fabs(xh));
      }
    const double dxh = invstd * (dmean + maxdev * dvar / (2 * (var + eps)));
    // the sums: K u sum |terms| each, ds also through xhat's error
    const double tdb = K * kU * adb, tds = K * kU * ads * 1.5 + dxh * adb;
    if (which == 2) {
      o[c] = db;
      to[c] = tdb;
      continue;
    }
    if (which == 1) {
      o[c] = ds;
      to[c] = tds + 2 * kU * fabs(ds);
      continue;
    }
    const double k = sc[c] * invstd, M = (double)q.m;
    for (int64_t b = 0; b < q.n; b++)
      for (int64_t i = 0; i < q.s; i++) {
        size_t at = (size_t)((b * q.c + c) * q.s + i);
        double xh = (x[at] - mean) * invstd;
        o[at] = k * (dy[at] - db / M - xh * ds / M);
        // dx = k (dy - db / M - xhat ds / M): the sums' and xhat's errors
        // scaled by k, k's own (through invstd), and 8 float32 roundings of
        // the largest term
        to[at] = fabs(k) * (tdb / M + fabs(xh) * tds / M + dxh * fabs(ds) / M) +
                 fabs(o[at]) * dvar / (2 * (var + eps)) +
                 8 * kU * fabs(k) * (fabs(dy[at]) + fabs(db) / M + (fabs(xh) + dxh) * fabs(ds) / M);
      }
  }
}

struct Case {
  const char *name;
  int64_t batch, c, h, w;
  int sm_count;
  float offset; // added to X: the statistics' cancellation
};

void CheckModel(const Case &cs, gcc_mode mode) {
  SCOPED_TRACE(std::string(cs.name) + (mode == GCC_MODE_TRAIN ? " train" : " eval"));
  if (gcc_emu_test::ShimPath().empty())
    GTEST_FAIL() << "tests/cuda_host_shim.h missing from the runfiles";
  gcc_graph *model = BnModel(cs.c, cs.h, cs.w, cs.batch);
  ASSERT_NE(model, nullptr);
  Compiled cp;
  std::string err;
  bool ok = CompileFor(model, mode, cs.batch, cs.sm_count, &cp, &err);
  gcc_graph_free(model);
  ASSERT_TRUE(ok) << err;
  const gcc_graph *g = cp.g;
  EmulatedModule mod;
  ASSERT_TRUE(mod.Compile(cp.ks.source, cs.name, &err)) << err;
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  int groups = 0, grads = 0;
  for (int k0 = 0; k0 < cp.ks.n_kernels;) {
    int gi = cp.ks.kernels[k0].group, k1 = k0;
    while (k1 + 1 < cp.ks.n_kernels && cp.ks.kernels[k1 + 1].group == gi)
      k1++;
    const gcc_group *gr = &g->groups[gi];
    const gcc_node *nd = &g->nodes[gr->nodes[0]];
    int first = k0;
    k0 = k1 + 1;
    if (nd->op != GCC_OP_BATCH_NORM && nd->op != GCC_OP_BATCH_NORM_GRAD) {
      // a large loss also has several (codegen/emit_loss.c: the rows or chunks, then their sum;
      // this model's MSE is over more than 16,384 elements)
      if (gr->kind != GCC_GROUP_LOSS) {
        EXPECT_EQ(first, k1) << "only BatchNorm and loss groups have several kernels: " << gr->name;
      }
      continue;
    }
    SCOPED_TRACE(gr->name);
    groups++;
    grads += nd->op == GCC_OP_BATCH_NORM_GRAD;
    // the last kernel is named after the group; the others say what they do
    EXPECT_STREQ(cp.ks.kernels[k1].name, gr->name);
    for (int k = first; k < k1; k++) {
      const char *nm = cp.ks.kernels[k].name;
      EXPECT_TRUE(strstr(nm, "_stats") || strstr(nm, "_sums")) << nm;
      EXPECT_GT(cp.ks.kernels[k].scratch_bytes, 0u) << nm;
    }
    // inputs: X (and dY) random, X shifted by the case's offset
    const bool is_grad = nd->op == GCC_OP_BATCH_NORM_GRAD;
    const int xv = nd->inputs[is_grad ? 1 : 0];
    const Geo q = GeoOf(g, xv);
    Bufs in;
    for (int j = 0; j < nd->n_inputs; j++) {
      int v = nd->inputs[j];
      std::vector<float> &b = in[v];
      b.resize((size_t)gcc_shape_numel(&g->values[v].shape, nullptr));
      for (float &f : b)
        f = u(rng);
      if (v == xv)
        for (float &f : b)
          f += cs.offset;
      if (!is_grad && j == 4) // the running variance is positive
        for (float &f : b)
          f = 0.5f + fabsf(f);
    }
    int64_t p = 1;
    for (int k = first; k < k1; k++)
      p = ChunksOf(cp.ks.kernels[k], q.c);
    if (first == k1) // evaluation form: one kernel, its work items are chunks too
      p = ChunksOf(cp.ks.kernels[k1], q.c);
    Ref ref;
    if (is_grad)
      ReferenceBnGrad(nd, q, p, in, &ref);
    else
      ReferenceBn(nd, q, p, in, &ref);
    Bufs run = in;
    run[nd->outputs[0]].assign(ref.val[nd->outputs[0]].size(), NAN);
    Bufs first_run = run;
    RunGroup(mod, cp.ks, first, k1, &first_run, 0, 0, false);
    for (auto &kv : ref.val) {
      const std::vector<float> &got = first_run.at(kv.first);
      const std::vector<double> &tol = ref.tol.at(kv.first);
      size_t bad = 0, worst = 0;
      double worst_ratio = 0;
      for (size_t i = 0; i < got.size(); i++) {
        double e = fabs((double)got[i] - kv.second[i]);
        double ratio = e / (tol[i] > 0 ? tol[i] : 1e-300);
        if (!(e <= tol[i]))
          bad++;
        if (!(ratio <= worst_ratio)) {
          worst_ratio = ratio;
          worst = i;
        }
      }
      EXPECT_EQ(bad, 0u) << "'" << g->values[kv.first].name << "': " << bad << " of " << got.size()
                         << " elements outside the derived bound; worst [" << worst << "] "
                         << got[worst] << " vs " << kv.second[worst] << " (bound " << tol[worst]
                         << ")";
      std::printf("[bn_kernels] %s %s %s: P %lld, %zu elements, worst error / bound %.3g\n",
                  cs.name, gr->name, g->values[kv.first].name, (long long)p, got.size(),
                  worst_ratio);
    }
    // run to run, and any grid, block or thread order: the same bits
    Bufs again = run;
    RunGroup(mod, cp.ks, first, k1, &again, 0, 0, false);
    EXPECT_TRUE(SameBits(first_run, again)) << "two runs differ";
    struct Shape {
      unsigned grid, block;
      bool rev;
    } shapes[] = {{3, 37, false}, {0, 0, true}, {1, 1, false}, {1000, 64, true}};
    for (const Shape &s : shapes) {
      SCOPED_TRACE("grid " + std::to_string(s.grid) + " block " + std::to_string(s.block) +
                   (s.rev ? " reversed" : ""));
      Bufs other = run;
      RunGroup(mod, cp.ks, first, k1, &other, s.grid, s.block, s.rev);
      EXPECT_TRUE(SameBits(first_run, other)) << "the launch shape changes the bits";
    }
  }
  EXPECT_GE(groups, mode == GCC_MODE_TRAIN ? 4 : 1); // BN, and dX, dscale, dB
  if (mode == GCC_MODE_TRAIN) {
    EXPECT_EQ(grads, 3);
  }
}

// float4 units (S = 256) with 4 chunks per channel; scalar units (S = 49,
// ResNet's last stage) with 2; one SM (a chunk per channel); X far from 0
// (mean 30, deviation 1: the cancellation Welford is there for).
const Case kCases[] = {
    {"f4_p4", 64, 2, 16, 16, 132, 0.0f},
    {"s1_p2", 40, 3, 7, 7, 132, 0.5f},
    {"one_sm", 16, 3, 5, 5, 1, 0.0f},
    {"offset30", 32, 2, 8, 8, 132, 30.0f},
};

TEST(BatchNormKernels, TrainingFormAndGradientsWithinTheDerivedBoundAndBitwiseRepeatable) {
  for (const Case &c : kCases)
    CheckModel(c, GCC_MODE_TRAIN);
}

TEST(BatchNormKernels, EvaluationFormWithinTheDerivedBoundAndBitwiseRepeatable) {
  for (const Case &c : kCases)
    CheckModel(c, GCC_MODE_EVAL);
}

// Launch geometry fits the work: ResNet-50's stem at batch 64 (X [64, 64,
// 112, 112], N*H*W = 802,816 per channel) on 132 SMs is read by over a
// thousand blocks of 256 threads (about 8 per SM), not one thread per channel.
TEST(BatchNormKernels, ResNetStemGeometryFillsTheDevice) {
  gcc_graph *model = BnModel(64, 112, 112, 64);
  ASSERT_NE(model, nullptr);
  Compiled cp;
  std::string err;
  bool ok = CompileFor(model, GCC_MODE_TRAIN, 64, 132, &cp, &err);
  gcc_graph_free(model);
  ASSERT_TRUE(ok) << err;
  int seen = 0;
  for (int i = 0; i < cp.ks.n_kernels; i++) {
    const gcc_kernel_info &k = cp.ks.kernels[i];
    const gcc_node *nd = &cp.g->nodes[cp.g->groups[k.group].nodes[0]];
    if (nd->op != GCC_OP_BATCH_NORM && nd->op != GCC_OP_BATCH_NORM_GRAD)
      continue;
    std::printf("[bn_kernels] stem: %s grid %d block %d work %lld scratch %zu\n", k.name,
                k.grid_dim, k.block_dim, (long long)k.work_items, k.scratch_bytes);
    if (nd->op == GCC_OP_BATCH_NORM_GRAD && nd->av[BN_GRAD_OUTPUT].i != 0 &&
        !strstr(k.name, "_stats") && !strstr(k.name, "_sums"))
      continue; // dscale / dB's last kernel: one thread a channel (64 values)
    seen++;
    EXPECT_EQ(k.block_dim, 256) << k.name;
    EXPECT_GE(k.grid_dim, 8 * 132 * 3 / 4) << k.name; // at least 6 blocks per SM
    EXPECT_LE(k.grid_dim, 65535) << k.name;
  }
  EXPECT_GE(seen, 6);
}

} // namespace
