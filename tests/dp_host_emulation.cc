// The CUDA plan of data-parallel training on the host-emulation backend,
// under mpirun (tests/mpi_data_parallel_test.sh runs it with -np 2): the
// bucketed schedule (AllReduce nodes issued after their gradients, on the
// communication stream; the optimizer update waiting for its buckets) with
// MPI standing in for NCCL behind runtime/comm.h. Every rank trains its
// share of each global batch on the emulated GPU; every rank also trains a
// one-process CPU session on the whole global batches; the parameters must
// agree within 1e-5 (relative to each tensor's largest magnitude).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

extern "C" {
#include "codegen/kernel_cache.h"
#include "graph/builder.h"
#include "runtime/comm.h"
#include "runtime/session.h"
}
#include "tests/host_backend.h"
#include "tests/test_kernel_cache.h"

namespace {

using gcc_host_test::HostBackend;

gcc_graph *SmallMlp() {
  gcc_builder *b = gcc_builder_new("dp_small_mlp", 11);
  int64_t xd[2] = {GCC_BATCH_DIM, 36}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "image", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "label", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 36, 24));
  h = gcc_build_relu(b, "relu2", gcc_build_linear(b, "fc2", h, 24, 16));
  int logits = gcc_build_linear(b, "fc3", h, 16, 5);
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts{};
  ts.loss = "loss";
  ts.prediction = "fc3.out";
  ts.input = "image";
  ts.target = "label";
  ts.dataset = "inline";
  ts.opt.kind = GCC_OPT_SGD;
  ts.opt.lr = 0.1f;
  ts.opt.momentum = 0.5f;
  ts.batch_size = 10;
  ts.epochs = 1;
  gcc_build_training(b, &ts);
  gcc_graph *g = nullptr;
  gcc_diag d{};
  EXPECT_EQ(gcc_builder_finish(b, &g, &d), GCC_OK) << d.msg;
  return g;
}

TEST(DataParallel, HostEmulatedCudaPlanMatchesOneProcess) {
  gcc_diag d{};
  gcc_comm *comm = nullptr;
  ASSERT_EQ(gcc_comm_create(&comm, &d), GCC_OK) << d.msg;
  if (comm->size < 2) {
    comm->destroy(comm);
    GTEST_SKIP() << "one process: run under mpirun -np 2 (tests/mpi_data_parallel_test.sh)";
  }
  gcc_graph *g = SmallMlp();
  ASSERT_NE(g, nullptr);
  HostBackend hb;
  gcc_session_options dso{};
  dso.threads = 1;
  dso.opt = g->training.opt;
  dso.backend = &hb.be;
  dso.device = GCC_DEV_CUDA(0);
  dso.plan.sm = 90;
  dso.plan.sm_count = 4;
  dso.plan.compile = gcc_kernel_cache_hook;
  dso.plan.compile_user = gcc_test::TestKernelCache();
  dso.plan.cuda_graph = 1; // refused for plans with an all-reduce (checked below)
  dso.max_pending = 1;
  dso.comm = comm;
  dso.bucket_bytes = 1024; // fc3 and fc2's bias, fc2's weight, fc1: several buckets
  gcc_session_options cso{};
  cso.threads = 1;
  cso.opt = g->training.opt;
  gcc_session *dev = nullptr, *cpu = nullptr;
  ASSERT_EQ(gcc_session_create(g, &dso, &dev, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_create(g, &cso, &cpu, &d), GCC_OK) << d.msg;
  ASSERT_EQ(gcc_session_broadcast_params(dev, &d), GCC_OK) << d.msg;
  const int steps = 8;
  for (int s = 0; s < steps; s++) {
    int64_t global = s == steps - 1 ? 7 : 10; // uneven: 10 = 5 + 5, 7 = 4 + 3
    std::mt19937 rng(100 + s);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<float> x((size_t)global * 36);
    std::vector<int64_t> y((size_t)global);
    for (float &v : x)
      v = n(rng);
    for (int64_t &v : y)
      v = (int64_t)(rng() % 5u);
    float loss = 0;
    ASSERT_EQ(gcc_session_train_step(cpu, x.data(), y.data(), global, &loss, &d), GCC_OK) << d.msg;
    int64_t first = 0, rows = 0;
    gcc_comm_share(global, comm->rank, comm->size, &first, &rows);
    gcc_session_set_shard(dev, rows, global);
    ASSERT_EQ(gcc_session_train_step(dev, x.data() + first * 36, y.data() + first, rows, &loss, &d),
              GCC_OK)
        << d.msg;
  }
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind != GCC_VALUE_PARAM)
      continue;
    float *a = nullptr, *b = nullptr;
    int64_t na = 0, nb = 0;
    ASSERT_EQ(gcc_session_param(dev, g->values[v].name, &a, &na, &d), GCC_OK) << d.msg;
    ASSERT_EQ(gcc_session_param(cpu, g->values[v].name, &b, &nb, &d), GCC_OK) << d.msg;
    ASSERT_EQ(na, nb);
    double m = 0, e = 0;
    for (int64_t i = 0; i < na; i++) {
      m = std::max(m, std::fabs((double)b[i]));
      e = std::max(e, std::fabs((double)a[i] - (double)b[i]));
    }
    printf("rank %d: %-12s max |emulated GPU - one process| / max = %.3g\n", comm->rank,
           g->values[v].name, m > 0 ? e / m : e);
    EXPECT_LE(m > 0 ? e / m : e, 1e-5) << g->values[v].name;
  }
  // the schedule: every step reduces each bucket once, then the update
  // waits for each; more than one bucket; no CUDA Graph with an all-reduce
  int buckets = 0, reduces = 0, waits = 0;
  for (auto &e : hb.collective_log) {
    buckets = std::max(buckets, e.second + 1);
    (e.first == 'r' ? reduces : waits)++;
  }
  printf("rank %d: %d buckets, %d all-reduces and %d waits in %d steps\n", comm->rank, buckets,
         reduces, waits, steps);
  EXPECT_GE(buckets, 2);
  EXPECT_EQ(reduces, buckets * steps);
  // one optimizer kernel per run of one bucket's updates: each waits for its bucket only
  EXPECT_GE(waits, reduces);
  ASSERT_FALSE(hb.collective_log.empty());
  EXPECT_EQ(hb.collective_log.front().first, 'r');
  EXPECT_EQ(hb.captures, 0);
  for (const std::string &v : hb.violations)
    ADD_FAILURE() << v;
  gcc_session_destroy(dev);
  gcc_session_destroy(cpu);
  gcc_graph_free(g);
  comm->destroy(comm);
}

} // namespace
