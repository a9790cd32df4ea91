// Tests of the per-device step-arena planner (passes/memplan.c): an
// independent brute-force verifier run over hundreds of random graphs
// (Relu / Add / Gemm / Reshape / Identity DAGs with random shapes, fan-out,
// views, keep-live values and devices), a check that the verifier itself
// catches broken plans, per-device separation of arenas, and the plans of
// the compiled reference models.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "graph/builder.h"
#include "graph/ir.h"
#include "codegen/lowering.h"
#include "graph/ops.h"
#include "models/models.h"
#include "passes/memplan.h"
#include "passes/passes.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/plan.h"

namespace {

struct GraphDeleter {
  void operator()(gcc_graph *g) const { gcc_graph_free(g); }
};
using GraphPtr = std::unique_ptr<gcc_graph, GraphDeleter>;

struct Plan {
  gcc_mem_plan p = {};
  Plan() = default;
  Plan(const Plan &) = delete;
  Plan &operator=(const Plan &) = delete;
  ~Plan() { gcc_mem_plan_free(&p); }
};

int64_t AlignUp(int64_t x) {
  return (x + GCC_ARENA_ALIGN - 1) / GCC_ARENA_ALIGN * GCC_ARENA_ALIGN;
}

int DevOf(const gcc_graph *g, int v) {
  return g->values[v].device >= 0 ? g->values[v].device : GCC_DEV_CPU;
}

bool IsView(const gcc_graph *g, int node) {
  return (gcc_op(g->nodes[node].op)->flags & GCC_OPF_ALIAS) != 0;
}

// ---- the independent verifier ------------------------------------------------

struct SweepBlock {
  int64_t off, size;
  int first, last, dev;
};

// Overlapping blocks (closed lifetimes, same device, shared bytes) found by a
// sweep over the schedule: the live blocks of a device, kept by offset, are
// pairwise disjoint, so a block that starts need only be checked against its
// neighbours there. O(n log n); the messages name blocks by index.
std::vector<std::string> SweepOverlaps(size_t n, const std::function<SweepBlock(size_t)> &at) {
  std::vector<std::string> bad;
  std::vector<SweepBlock> b(n);
  std::vector<size_t> by_first(n), by_last(n);
  for (size_t i = 0; i < n; i++) {
    b[i] = at(i);
    by_first[i] = by_last[i] = i;
  }
  std::sort(by_first.begin(), by_first.end(),
            [&](size_t x, size_t y) { return b[x].first < b[y].first; });
  std::sort(by_last.begin(), by_last.end(),
            [&](size_t x, size_t y) { return b[x].last < b[y].last; });
  std::map<std::pair<int, int64_t>, size_t> live; // (dev, offset) -> block
  std::vector<char> in(n, 0);
  size_t e = 0;
  for (size_t k = 0; k < n && bad.size() < 20; k++) {
    const size_t i = by_first[k];
    for (; e < n && b[by_last[e]].last < b[i].first; e++)
      if (in[by_last[e]]) {
        live.erase({b[by_last[e]].dev, b[by_last[e]].off});
        in[by_last[e]] = 0;
      }
    if (b[i].size == 0)
      continue; // holds no byte
    auto it = live.lower_bound({b[i].dev, b[i].off});
    auto report = [&](size_t j) {
      bad.push_back("block " + std::to_string(i) + " [" + std::to_string(b[i].off) + ", +" +
                    std::to_string(b[i].size) + ") life [" + std::to_string(b[i].first) + ", " +
                    std::to_string(b[i].last) + "] overlaps block " + std::to_string(j) + " [" +
                    std::to_string(b[j].off) + ", +" + std::to_string(b[j].size) + ") life [" +
                    std::to_string(b[j].first) + ", " + std::to_string(b[j].last) + "]");
    };
    if (it != live.end() && it->first.first == b[i].dev &&
        it->first.second < b[i].off + b[i].size) {
      report(it->second);
      continue;
    }
    if (it != live.begin()) {
      auto prev = std::prev(it);
      const SweepBlock &p = b[prev->second];
      if (prev->first.first == b[i].dev && p.off + p.size > b[i].off) {
        report(prev->second);
        continue;
      }
    }
    live[{b[i].dev, b[i].off}] = i;
    in[i] = 1;
  }
  return bad;
}

// What the plan must satisfy, derived only from the graph, its schedule (node
// order) and the keep-live values:
//   - a view (Reshape/Flatten) uses the storage of the value it views
//     (transitively: its root); its uses extend the root's lifetime;
//   - an ACTIVATION root referenced by the schedule (or kept live) is planned:
//     it lives from the node that writes it to the last node that reads it or
//     any view of it, and to the end of the step (n_nodes) if kept live;
//   - everything else (inputs, parameters, constants, views of those) has no
//     offset (-1);
//   - two planned values on the same device whose lifetimes overlap (closed
//     intervals: a node's inputs and outputs are live together) never share
//     a byte; offsets are GCC_ARENA_ALIGN-aligned; every value fits below its
//     device's peak; the peak is at most the sum of the aligned sizes and at
//     least the bytes live at any one point of the schedule;
//   - a node on the CPU whose op declares a workspace (gcc_op_desc.workspace,
//     im2col for Conv) has that many bytes (aligned) in the CPU's arena,
//     live during its own step only, under the same rules as a value; other
//     nodes have none.
std::vector<std::string> Verify(const gcc_graph *g, const int *keep, int n_keep,
                                const gcc_mem_plan &p) {
  std::vector<std::string> bad;
  auto fail = [&](const std::string &s) {
    if (bad.size() < 20)
      bad.push_back(s);
  };
  const int nv = g->n_values, nn = g->n_nodes;
  if (p.n_values != nv) {
    fail("n_values " + std::to_string(p.n_values) + " != " + std::to_string(nv));
    return bad;
  }
  // roots, through the producers of views
  std::vector<int> root(nv, -1);
  std::function<int(int)> find_root = [&](int v) -> int {
    if (root[v] >= 0)
      return root[v];
    int prod = g->values[v].producer;
    int r = v;
    if (prod >= 0 && IsView(g, prod) && g->nodes[prod].inputs[0] >= 0 &&
        g->nodes[prod].outputs[0] == v)
      r = find_root(g->nodes[prod].inputs[0]);
    return root[v] = r;
  };
  for (int v = 0; v < nv; v++)
    find_root(v);

  // lifetimes per root
  const int kNone = -2;
  std::vector<int> first(nv, kNone), last(nv, kNone);
  std::vector<char> ref(nv, 0);
  // when each node runs: a node of a fused group runs with its group, a
  // GEMM group (one cuBLASLt call) where its first node stands, any other
  // group where its last node stands
  std::vector<int> when(nn);
  for (int j = 0; j < nn; j++) {
    when[j] = j;
    int gi = g->nodes[j].group;
    if (gi < 0)
      continue;
    const gcc_group &gr = g->groups[gi];
    std::vector<int> members(gr.nodes, gr.nodes + gr.n_nodes);
    when[j] = gr.kind == GCC_GROUP_GEMM ? *std::min_element(members.begin(), members.end())
                                        : *std::max_element(members.begin(), members.end());
  }
  for (int j = 0; j < nn; j++) {
    const gcc_node *n = &g->nodes[j];
    const int i = when[j];
    for (int k = 0; k < n->n_outputs; k++) {
      int r = root[n->outputs[k]];
      ref[r] = 1;
      if (first[r] == kNone || first[r] > i)
        first[r] = i;
      last[r] = std::max(last[r], i);
    }
    for (int k = 0; k < n->n_inputs; k++) {
      if (n->inputs[k] < 0)
        continue;
      int r = root[n->inputs[k]];
      ref[r] = 1;
      if (first[r] == kNone)
        first[r] = -1; // defined before the step
      last[r] = std::max(last[r], i);
    }
  }
  for (int k = 0; k < n_keep; k++) {
    if (keep[k] < 0)
      continue;
    int r = root[keep[k]];
    ref[r] = 1;
    if (first[r] == kNone)
      first[r] = -1;
    last[r] = nn;
  }

  std::vector<int> planned;
  std::vector<int64_t> size(nv, 0);
  int max_dev = 0;
  for (int v = 0; v < nv; v++)
    max_dev = std::max(max_dev, DevOf(g, v));
  for (int v = 0; v < nv; v++) {
    const gcc_value *val = &g->values[v];
    const std::string name = val->name;
    if (p.root[v] != root[v])
      fail(name + ": root " + std::to_string(p.root[v]) + ", expected " + std::to_string(root[v]));
    if (root[v] != v) {
      if (p.offset[v] != p.offset[root[v]])
        fail(name + ": a view at offset " + std::to_string(p.offset[v]) + " but its root '" +
             g->values[root[v]].name + "' is at " + std::to_string(p.offset[root[v]]));
      continue;
    }
    if (val->kind != GCC_VALUE_ACTIVATION || !ref[v]) {
      if (p.offset[v] != -1)
        fail(name + ": not planned but has offset " + std::to_string(p.offset[v]));
      continue;
    }
    int64_t numel = gcc_shape_numel(&val->shape, nullptr);
    size[v] = AlignUp((numel > 0 ? numel : 1) * static_cast<int64_t>(gcc_dtype_size(val->dtype)));
    planned.push_back(v);
    if (p.offset[v] < 0) {
      fail(name + ": planned value without an offset");
      continue;
    }
    if (p.offset[v] % GCC_ARENA_ALIGN != 0)
      fail(name + ": offset " + std::to_string(p.offset[v]) + " is not aligned");
    int dev = DevOf(g, v);
    if (dev >= p.n_devices || p.offset[v] + size[v] > static_cast<int64_t>(p.device_bytes[dev]))
      fail(name + ": [" + std::to_string(p.offset[v]) + ", " +
           std::to_string(p.offset[v] + size[v]) + ") exceeds its device's arena");
    if (p.first[v] != first[v] || p.last[v] != last[v])
      fail(name + ": lifetime [" + std::to_string(p.first[v]) + ", " + std::to_string(p.last[v]) +
           "], expected [" + std::to_string(first[v]) + ", " + std::to_string(last[v]) + "]");
  }
  if (!bad.empty())
    return bad;

  // every planned block: the values, then the node workspaces
  struct Block {
    std::string name;
    int64_t off, size;
    int first, last, dev;
  };
  std::vector<Block> blocks;
  for (int v : planned)
    blocks.push_back({g->values[v].name, p.offset[v], size[v], first[v], last[v], DevOf(g, v)});
  if (p.n_nodes != nn) {
    fail("n_nodes " + std::to_string(p.n_nodes) + " != " + std::to_string(nn));
    return bad;
  }
  for (int i = 0; i < nn; i++) {
    bool cpu = g->nodes[i].device < 0 || g->nodes[i].device == GCC_DEV_CPU;
    int64_t want = cpu ? AlignUp(static_cast<int64_t>(gcc_cpu_workspace(g, i))) : 0;
    const std::string name = std::string("workspace of ") + g->nodes[i].name;
    if (static_cast<int64_t>(p.ws_bytes[i]) != want) {
      fail(name + ": " + std::to_string(p.ws_bytes[i]) + " bytes, expected " +
           std::to_string(want));
      continue;
    }
    if (want == 0) {
      if (p.ws_offset[i] != -1)
        fail(name + ": none expected, offset " + std::to_string(p.ws_offset[i]));
      continue;
    }
    if (p.ws_offset[i] < 0 || p.ws_offset[i] % GCC_ARENA_ALIGN != 0 ||
        p.ws_offset[i] + want > static_cast<int64_t>(p.device_bytes[GCC_DEV_CPU]))
      fail(name + ": bad offset " + std::to_string(p.ws_offset[i]));
    blocks.push_back({name, p.ws_offset[i], want, i, i, GCC_DEV_CPU});
  }
  if (!bad.empty())
    return bad;

  // no two blocks live at the same time on the same device share a byte:
  // every pair for small plans, a sweep for large ones (the 100k-node chain)
  if (blocks.size() <= 4000) {
    for (size_t a = 0; a < blocks.size(); a++)
      for (size_t b = a + 1; b < blocks.size(); b++) {
        const Block &u = blocks[a], &v = blocks[b];
        if (u.dev != v.dev)
          continue;
        if (u.first > v.last || v.first > u.last)
          continue;
        if (u.off < v.off + v.size && v.off < u.off + u.size)
          fail(u.name + " [" + std::to_string(u.off) + ", +" + std::to_string(u.size) + ") life [" +
               std::to_string(u.first) + ", " + std::to_string(u.last) + "] overlaps " + v.name +
               " [" + std::to_string(v.off) + ", +" + std::to_string(v.size) + ") life [" +
               std::to_string(v.first) + ", " + std::to_string(v.last) + "]");
      }
  } else {
    for (const std::string &s : SweepOverlaps(blocks.size(), [&](size_t i) {
           const Block &b = blocks[i];
           return SweepBlock{b.off, b.size, b.first, b.last, b.dev};
         }))
      fail(s);
  }

  // peaks
  if (p.n_devices != max_dev + 1)
    fail("n_devices " + std::to_string(p.n_devices) + ", expected " + std::to_string(max_dev + 1));
  int64_t total = 0;
  for (const Block &b : blocks)
    total += b.size;
  if (static_cast<int64_t>(p.total_bytes) != total)
    fail("total_bytes " + std::to_string(p.total_bytes) + ", expected " + std::to_string(total));
  for (int dev = 0; dev < std::min(p.n_devices, max_dev + 1); dev++) {
    int64_t sum = 0, largest = 0, live_peak = 0;
    for (const Block &b : blocks)
      if (b.dev == dev) {
        sum += b.size;
        largest = std::max(largest, b.size);
      }
    std::map<int, int64_t> delta; // bytes live from t on
    for (const Block &b : blocks)
      if (b.dev == dev) {
        delta[b.first] += b.size;
        delta[b.last + 1] -= b.size;
      }
    int64_t live = 0;
    for (const auto &e : delta) {
      live += e.second;
      live_peak = std::max(live_peak, live);
    }
    int64_t peak = static_cast<int64_t>(p.device_bytes[dev]);
    const std::string d = "device " + std::to_string(dev) + ": peak " + std::to_string(peak);
    if (peak > sum)
      fail(d + " > sum of its values " + std::to_string(sum));
    if (peak < largest)
      fail(d + " < its largest value " + std::to_string(largest));
    if (peak < live_peak)
      fail(d + " < bytes live at once " + std::to_string(live_peak));
    if (peak % GCC_ARENA_ALIGN != 0)
      fail(d + " is not aligned");
  }
  if (p.arena_bytes != p.device_bytes[GCC_DEV_CPU])
    fail("arena_bytes " + std::to_string(p.arena_bytes) + " != the CPU's peak " +
         std::to_string(p.device_bytes[GCC_DEV_CPU]));
  return bad;
}

std::string Join(const std::vector<std::string> &v) {
  std::string s;
  for (const auto &x : v)
    s += "  " + x + "\n";
  return s;
}

// ---- random graphs -----------------------------------------------------------

enum DeviceMode { kUnplaced, kAllCpu, kMixed };

struct RandomGraph {
  GraphPtr g;
  std::vector<int> keep;
  std::string error; // non-empty if building failed
};

class Generator {
public:
  explicit Generator(uint64_t seed) : rng_(seed) {}

  RandomGraph Make(DeviceMode mode) {
    RandomGraph out;
    gcc_diag d = {};
    out.g.reset(gcc_graph_new("random", "<random>"));
    g_ = out.g.get();
    pool_.clear();
    n_values_ = 0;
    mode_ = mode;
    int n_inputs = Uniform(1, 3);
    for (int i = 0; i < n_inputs; i++) {
      gcc_shape s = Shape2(Dim(), Dim());
      int v = AddValue(s, GCC_VALUE_INPUT, GCC_DEV_CPU);
      if (v < 0 || gcc_graph_add_input(g_, v) != GCC_OK)
        return Fail(&out, "input");
      pool_.push_back(v);
    }
    int n_nodes = Uniform(1, 48);
    for (int i = 0; i < n_nodes; i++)
      if (!AddRandomNode(i))
        return Fail(&out, "node " + std::to_string(i) + ": " + diag_.msg);
    if (gcc_graph_link(g_, &d) != GCC_OK || gcc_infer_shapes(g_, &d) != GCC_OK)
      return Fail(&out, d.msg);
    // values read after the step: a few activations (views included), at
    // times an input, and an omitted (-1) entry
    int n_keep = Uniform(0, 3);
    for (int k = 0; k < n_keep; k++)
      out.keep.push_back(pool_[Uniform(0, (int)pool_.size() - 1)]);
    if (Chance(0.2))
      out.keep.push_back(-1);
    return out;
  }

  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool Chance(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

private:
  static RandomGraph Fail(RandomGraph *out, const std::string &why) {
    out->error = why;
    return std::move(*out);
  }
  int64_t Dim() {
    static const int64_t dims[] = {1, 2, 3, 5, 7, 8, 13, 16, 31, 32, 64, 100};
    return dims[Uniform(0, (int)(sizeof dims / sizeof dims[0]) - 1)];
  }
  static gcc_shape Shape2(int64_t a, int64_t b) {
    gcc_shape s = {};
    s.ndim = 2;
    s.dims[0] = a;
    s.dims[1] = b;
    return s;
  }
  int AddValue(const gcc_shape &s, gcc_value_kind kind, int dev) {
    std::string name = "v" + std::to_string(n_values_++);
    int v = -1;
    if (gcc_graph_add_value(g_, name.c_str(), GCC_DT_FLOAT32, &s, kind, nullptr, 0, &v, &diag_) !=
        GCC_OK)
      return -1;
    g_->values[v].device = mode_ == kUnplaced ? -1 : dev;
    return v;
  }
  int PickOperand() {
    // mostly recent values (chains), sometimes any (fan-out, long lifetimes)
    int n = static_cast<int>(pool_.size());
    if (Chance(0.6))
      return pool_[Uniform(std::max(0, n - 4), n - 1)];
    return pool_[Uniform(0, n - 1)];
  }
  int SameShape(const gcc_shape &s) {
    std::vector<int> c;
    for (int v : pool_)
      if (gcc_shape_equal(&g_->values[v].shape, &s))
        c.push_back(v);
    return c.empty() ? -1 : c[Uniform(0, (int)c.size() - 1)];
  }
  int NodeDevice() {
    if (mode_ != kMixed)
      return GCC_DEV_CPU;
    int r = Uniform(0, 9);
    return r < 5 ? GCC_DEV_CPU : r < 9 ? GCC_DEV_CUDA(0) : GCC_DEV_CUDA(1);
  }

  bool AddRandomNode(int index) {
    int x = PickOperand();
    gcc_shape xs = g_->values[x].shape;
    int dev = NodeDevice();
    int r = Uniform(0, 12);
    int op;
    std::vector<int> inputs = {x};
    gcc_shape ys = xs;
    std::vector<int64_t> reshape;
    bool trans_b = false;
    if (r < 3) {
      op = GCC_OP_RELU;
    } else if (r < 5) {
      op = GCC_OP_IDENTITY;
    } else if (r < 8) {
      op = GCC_OP_ADD;
      int y = Chance(0.7) ? SameShape(xs) : -1; // may be x itself: Add(x, x)
      if (y < 0) {
        gcc_shape ps = xs;
        if (xs.ndim == 2 && Chance(0.5))
          ps = Shape2(1, xs.dims[1]); // broadcast row
        y = AddValue(ps, GCC_VALUE_PARAM, GCC_DEV_CPU);
        if (y < 0)
          return false;
      }
      inputs.push_back(y);
      if (Chance(0.5))
        std::swap(inputs[0], inputs[1]);
      if (!gcc_shape_equal(&g_->values[inputs[0]].shape, &xs))
        gcc_broadcast_shapes(&g_->values[inputs[0]].shape, &g_->values[inputs[1]].shape, &ys);
    } else if (r < 11 && xs.ndim == 2) {
      op = GCC_OP_GEMM;
      int64_t m = xs.dims[0], k = xs.dims[1];
      int w = -1;
      if (Chance(0.3)) { // an activation or input of shape (K, N)
        std::vector<int> c;
        for (int v : pool_)
          if (g_->values[v].shape.ndim == 2 && g_->values[v].shape.dims[0] == k)
            c.push_back(v);
        if (!c.empty())
          w = c[Uniform(0, (int)c.size() - 1)];
      }
      int64_t n;
      if (w >= 0) {
        n = g_->values[w].shape.dims[1];
      } else { // nn.Linear: W (N, K), transB = 1
        n = Dim();
        w = AddValue(Shape2(n, k), GCC_VALUE_PARAM, GCC_DEV_CPU);
        if (w < 0)
          return false;
        trans_b = true;
      }
      inputs.push_back(w);
      if (Chance(0.5)) {
        gcc_shape bs = {};
        bs.ndim = 1;
        bs.dims[0] = n;
        int b = AddValue(bs, GCC_VALUE_PARAM, GCC_DEV_CPU);
        if (b < 0)
          return false;
        inputs.push_back(b);
      }
      ys = Shape2(m, n);
    } else {
      op = GCC_OP_RESHAPE;
      int64_t numel = gcc_shape_numel(&xs, nullptr);
      int kind = Uniform(0, 3);
      if (kind == 0 && xs.ndim == 2)
        reshape = {xs.dims[1], xs.dims[0]};
      else if (kind == 1)
        reshape = {numel, 1};
      else if (kind == 2)
        reshape = {1, numel};
      else
        reshape = {1, xs.dims[0], numel / xs.dims[0]};
      ys.ndim = static_cast<int>(reshape.size());
      for (int i = 0; i < ys.ndim; i++)
        ys.dims[i] = reshape[i];
      // a view lives where the value it views lives
      int rootdev = g_->values[x].device;
      dev = rootdev >= 0 ? rootdev : GCC_DEV_CPU;
      if (g_->values[x].kind == GCC_VALUE_INPUT && mode_ == kMixed)
        dev = NodeDevice();
    }
    int y = AddValue(ys, GCC_VALUE_ACTIVATION, dev);
    if (y < 0)
      return false;
    std::string name = "n" + std::to_string(index);
    int node = -1;
    if (gcc_graph_add_node(g_, name.c_str(), op, inputs.data(), (int)inputs.size(), &y, 1, &node,
                           &diag_) != GCC_OK)
      return false;
    if (op == GCC_OP_GEMM && trans_b && gcc_node_set_int(g_, node, "transB", 1) != GCC_OK)
      return false;
    if (op == GCC_OP_RESHAPE &&
        gcc_node_set_ints(g_, node, "shape", reshape.data(), (int)reshape.size()) != GCC_OK)
      return false;
    g_->nodes[node].device = mode_ == kUnplaced ? -1 : dev;
    pool_.push_back(y);
    return true;
  }

  std::mt19937_64 rng_;
  gcc_graph *g_ = nullptr;
  std::vector<int> pool_;
  int n_values_ = 0;
  DeviceMode mode_ = kAllCpu;
  gcc_diag diag_ = {};
};

class RandomGraphs : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomGraphs, PlansAreValid) {
  Generator gen(GetParam());
  int graphs = 0, views = 0, mixed_devices = 0, reuse = 0;
  for (int iter = 0; iter < 200; iter++) {
    DeviceMode mode = static_cast<DeviceMode>(iter % 3);
    RandomGraph rg = gen.Make(mode);
    ASSERT_EQ(rg.error, "") << "seed " << GetParam() << " graph " << iter;
    const gcc_graph *g = rg.g.get();
    Plan plan;
    gcc_diag d = {};
    ASSERT_EQ(
        gcc_plan_memory(g, rg.keep.data(), (int)rg.keep.size(), gcc_cpu_workspace, &plan.p, &d),
        GCC_OK)
        << d.msg;
    auto bad = Verify(g, rg.keep.data(), (int)rg.keep.size(), plan.p);
    if (!bad.empty()) {
      std::ostringstream ir;
      for (int i = 0; i < g->n_nodes; i++) {
        ir << "  " << i << " " << g->nodes[i].name << " " << gcc_op_name(g->nodes[i].op) << "(";
        for (int k = 0; k < g->nodes[i].n_inputs; k++)
          ir << (k ? ", " : "") << g->values[g->nodes[i].inputs[k]].name;
        ir << ") -> " << g->values[g->nodes[i].outputs[0]].name << " dev " << g->nodes[i].device
           << "\n";
      }
      FAIL() << "seed " << GetParam() << " graph " << iter << ":\n"
             << Join(bad) << "schedule:\n"
             << ir.str();
    }
    graphs++;
    for (int i = 0; i < g->n_nodes; i++)
      views += IsView(g, i);
    mixed_devices += plan.p.n_devices > 1;
    reuse += plan.p.arena_bytes < plan.p.total_bytes;
  }
  // the generator exercises what it should
  EXPECT_EQ(graphs, 200);
  EXPECT_GT(views, 20);
  EXPECT_GT(mixed_devices, 10);
  EXPECT_GT(reuse, 10);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomGraphs, ::testing::Values(1u, 2u, 3u, 0xC0FFEEu, 20261122u));

// ---- the verifier can fail -----------------------------------------------------

// x -> Relu -> Relu -> ... : consecutive values are live together.
GraphPtr Chain(int n, int dev_every_other = -1) {
  gcc_diag d = {};
  gcc_graph *g = gcc_graph_new("chain", "<chain>");
  gcc_shape s = {};
  s.ndim = 2;
  s.dims[0] = 8;
  s.dims[1] = 5; // 160 bytes: not a multiple of the alignment
  int x;
  EXPECT_EQ(gcc_graph_add_value(g, "x", GCC_DT_FLOAT32, &s, GCC_VALUE_INPUT, nullptr, 0, &x, &d),
            GCC_OK);
  gcc_graph_add_input(g, x);
  g->values[x].device = GCC_DEV_CPU;
  for (int i = 0; i < n; i++) {
    int y, node;
    std::string name = "r" + std::to_string(i);
    EXPECT_EQ(gcc_graph_add_value(g, name.c_str(), GCC_DT_FLOAT32, &s, GCC_VALUE_ACTIVATION,
                                  nullptr, 0, &y, &d),
              GCC_OK);
    EXPECT_EQ(gcc_graph_add_node(g, name.c_str(), GCC_OP_RELU, &x, 1, &y, 1, &node, &d), GCC_OK);
    int dev = dev_every_other >= 0 && i % 2 ? dev_every_other : GCC_DEV_CPU;
    g->nodes[node].device = dev;
    g->values[y].device = dev;
    x = y;
  }
  EXPECT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  return GraphPtr(g);
}

TEST(MemplanVerifier, CatchesBrokenPlans) {
  GraphPtr g = Chain(6);
  Plan plan;
  gcc_diag d = {};
  ASSERT_EQ(gcc_plan_memory(g.get(), nullptr, 0, gcc_cpu_workspace, &plan.p, &d), GCC_OK) << d.msg;
  ASSERT_EQ(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  // two buffers suffice for a chain, reused in turn
  EXPECT_EQ(plan.p.arena_bytes, 2u * 192u);
  EXPECT_EQ(plan.p.total_bytes, 6u * 192u);

  std::vector<int64_t> saved(plan.p.offset, plan.p.offset + plan.p.n_values);
  auto restore = [&] { std::copy(saved.begin(), saved.end(), plan.p.offset); };
  // everything at offset 0, as a planner that ignores lifetimes might do
  for (int v = 0; v < plan.p.n_values; v++)
    if (plan.p.offset[v] >= 0)
      plan.p.offset[v] = 0;
  EXPECT_NE(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  restore();
  // misaligned
  plan.p.offset[gcc_graph_find(g.get(), "r3")] += 8;
  EXPECT_NE(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  restore();
  // an input given arena bytes
  plan.p.offset[gcc_graph_find(g.get(), "x")] = 0;
  EXPECT_NE(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  restore();
  // a peak too small for what is live at once
  size_t peak = plan.p.device_bytes[0];
  plan.p.device_bytes[0] = 192;
  plan.p.arena_bytes = 192;
  EXPECT_NE(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  plan.p.device_bytes[0] = plan.p.arena_bytes = peak;
  // a kept value (the first one) must survive to the end: with it kept, the
  // unchanged plan of the unkept graph is wrong
  int keep = gcc_graph_find(g.get(), "r0");
  EXPECT_NE(Join(Verify(g.get(), &keep, 1, plan.p)), "");
  Plan kept;
  ASSERT_EQ(gcc_plan_memory(g.get(), &keep, 1, gcc_cpu_workspace, &kept.p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(Join(Verify(g.get(), &keep, 1, kept.p)), "");
  EXPECT_EQ(kept.p.last[keep], g->n_nodes);
  EXPECT_EQ(kept.p.arena_bytes, 3u * 192u);
}

// ---- per-device separation ------------------------------------------------------

// Two independent chains A and B, interleaved in the schedule so that their
// values are live at the same time: a_i = f(a_{i-1}), b_i = f(b_{i-1}), with
// Gemm / Add / Relu / Reshape of different sizes. A's nodes run on dev_a, B's
// on dev_b; with_a / with_b leave a chain out (same construction otherwise).
GraphPtr TwoChains(bool with_a, bool with_b, int dev_a, int dev_b) {
  gcc_diag d = {};
  gcc_graph *g = gcc_graph_new("two_chains", "<two_chains>");
  struct Chain {
    const char *p;
    bool on;
    int dev;
    int cur;
    int64_t rows, cols;
  } ch[2] = {{"a", with_a, dev_a, -1, 16, 24}, {"b", with_b, dev_b, -1, 9, 40}};
  auto value = [&](const std::string &name, std::vector<int64_t> dims, gcc_value_kind kind,
                   int dev) {
    gcc_shape s = {};
    s.ndim = static_cast<int>(dims.size());
    for (int i = 0; i < s.ndim; i++)
      s.dims[i] = dims[i];
    int v = -1;
    EXPECT_EQ(gcc_graph_add_value(g, name.c_str(), GCC_DT_FLOAT32, &s, kind, nullptr, 0, &v, &d),
              GCC_OK)
        << d.msg;
    g->values[v].device = dev;
    return v;
  };
  auto node = [&](Chain &c, const std::string &name, int op, std::vector<int> in,
                  std::vector<int64_t> out_dims) {
    int y = value(std::string(c.p) + "." + name, out_dims, GCC_VALUE_ACTIVATION, c.dev);
    int n = -1;
    EXPECT_EQ(gcc_graph_add_node(g, (std::string(c.p) + "/" + name).c_str(), op, in.data(),
                                 (int)in.size(), &y, 1, &n, &d),
              GCC_OK)
        << d.msg;
    g->nodes[n].device = c.dev;
    return std::make_pair(n, y);
  };
  for (Chain &c : ch)
    if (c.on) {
      c.cur = value(std::string(c.p) + ".in", {c.rows, c.cols}, GCC_VALUE_INPUT, GCC_DEV_CPU);
      gcc_graph_add_input(g, c.cur);
    }
  for (int step = 0; step < 6; step++)
    for (Chain &c : ch) {
      if (!c.on)
        continue;
      std::string s = std::to_string(step);
      switch (step % 3) {
      case 0: {
        int64_t n = c.cols * 2 - 1;
        int w = value(std::string(c.p) + ".w" + s, {n, c.cols}, GCC_VALUE_PARAM, c.dev);
        auto r = node(c, "gemm" + s, GCC_OP_GEMM, {c.cur, w}, {c.rows, n});
        gcc_node_set_int(g, r.first, "transB", 1);
        c.cur = r.second;
        c.cols = n;
        break;
      }
      case 1: {
        auto r = node(c, "relu" + s, GCC_OP_RELU, {c.cur}, {c.rows, c.cols});
        int keep = c.cur;
        c.cur = r.second;
        auto a = node(c, "add" + s, GCC_OP_ADD, {c.cur, keep}, {c.rows, c.cols});
        c.cur = a.second;
        break;
      }
      default: {
        std::vector<int64_t> shape = {c.cols, c.rows};
        auto r = node(c, "view" + s, GCC_OP_RESHAPE, {c.cur}, shape);
        gcc_node_set_ints(g, r.first, "shape", shape.data(), 2);
        std::swap(c.rows, c.cols);
        c.cur = r.second;
        break;
      }
      }
    }
  EXPECT_EQ(gcc_graph_link(g, &d), GCC_OK) << d.msg;
  EXPECT_EQ(gcc_infer_shapes(g, &d), GCC_OK) << d.msg;
  return GraphPtr(g);
}

TEST(MemplanDevices, ArenasArePlannedIndependently) {
  const int cpu = GCC_DEV_CPU, cuda = GCC_DEV_CUDA(0);
  GraphPtr mixed = TwoChains(true, true, cpu, cuda);
  GraphPtr only_a = TwoChains(true, false, cpu, cuda);
  GraphPtr only_b = TwoChains(false, true, cpu, cuda);
  GraphPtr same = TwoChains(true, true, cpu, cpu);
  Plan pm, pa, pb, ps;
  gcc_diag d = {};
  ASSERT_EQ(gcc_plan_memory(mixed.get(), nullptr, 0, gcc_cpu_workspace, &pm.p, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_plan_memory(only_a.get(), nullptr, 0, gcc_cpu_workspace, &pa.p, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_plan_memory(only_b.get(), nullptr, 0, gcc_cpu_workspace, &pb.p, &d), GCC_OK)
      << d.msg;
  ASSERT_EQ(gcc_plan_memory(same.get(), nullptr, 0, gcc_cpu_workspace, &ps.p, &d), GCC_OK) << d.msg;
  for (auto *x : {&mixed, &only_a, &only_b, &same}) {
    const Plan &p = x == &mixed ? pm : x == &only_a ? pa : x == &only_b ? pb : ps;
    EXPECT_EQ(Join(Verify(x->get(), nullptr, 0, p.p)), "") << (*x)->name;
  }
  ASSERT_EQ(pm.p.n_devices, 2);
  // each device's arena is exactly what its chain needs on its own ...
  EXPECT_EQ(pm.p.device_bytes[cpu], pa.p.device_bytes[cpu]);
  EXPECT_EQ(pm.p.device_bytes[cuda], pb.p.device_bytes[cuda]);
  EXPECT_EQ(pa.p.n_devices, 1); // no value of A's graph is on cuda:0
  ASSERT_EQ(pb.p.n_devices, 2);
  EXPECT_EQ(pb.p.device_bytes[cpu], 0u);
  EXPECT_EQ(pm.p.arena_bytes, pa.p.arena_bytes);
  // ... with the same offsets, value by value
  int compared = 0;
  for (int v = 0; v < mixed->n_values; v++) {
    const gcc_value *val = &mixed->values[v];
    if (val->kind != GCC_VALUE_ACTIVATION)
      continue;
    const gcc_graph *alone = val->name[0] == 'a' ? only_a.get() : only_b.get();
    const gcc_mem_plan &pl = val->name[0] == 'a' ? pa.p : pb.p;
    int u = gcc_graph_find(alone, val->name);
    ASSERT_GE(u, 0) << val->name;
    EXPECT_EQ(pm.p.offset[v], pl.offset[u]) << val->name;
    compared++;
  }
  EXPECT_GT(compared, 10);
  // values of different devices live at the same time share offsets freely
  int a0 = gcc_graph_find(mixed.get(), "a.gemm0"), b0 = gcc_graph_find(mixed.get(), "b.gemm0");
  ASSERT_GE(a0, 0);
  ASSERT_GE(b0, 0);
  EXPECT_LE(pm.p.first[a0], pm.p.last[b0]);
  EXPECT_LE(pm.p.first[b0], pm.p.last[a0]);
  // on one device the two chains must fit side by side
  EXPECT_GT(ps.p.arena_bytes, pa.p.arena_bytes);
  EXPECT_GT(ps.p.arena_bytes, pb.p.device_bytes[cuda]);
  EXPECT_GE(ps.p.arena_bytes, std::max(pa.p.arena_bytes, pb.p.device_bytes[cuda]));
  EXPECT_EQ(ps.p.total_bytes, pm.p.total_bytes);

  // moving one chain's values to another device never changes the other's plan
  GraphPtr moved = TwoChains(true, true, cpu, GCC_DEV_CUDA(1));
  Plan pv;
  ASSERT_EQ(gcc_plan_memory(moved.get(), nullptr, 0, gcc_cpu_workspace, &pv.p, &d), GCC_OK)
      << d.msg;
  EXPECT_EQ(Join(Verify(moved.get(), nullptr, 0, pv.p)), "");
  ASSERT_EQ(pv.p.n_devices, 3);
  EXPECT_EQ(pv.p.device_bytes[cpu], pm.p.device_bytes[cpu]);
  EXPECT_EQ(pv.p.device_bytes[GCC_DEV_CUDA(0)], 0u);
  EXPECT_EQ(pv.p.device_bytes[GCC_DEV_CUDA(1)], pm.p.device_bytes[cuda]);
}

TEST(MemplanDevices, AlternatingDevicesInOneChain) {
  // r0 cpu, r1 cuda, r2 cpu, ...: on each device no two values are live at
  // once (r_{i} and r_{i+2} never overlap), so each arena holds one value
  GraphPtr g = Chain(8, GCC_DEV_CUDA(0));
  Plan plan;
  gcc_diag d = {};
  ASSERT_EQ(gcc_plan_memory(g.get(), nullptr, 0, gcc_cpu_workspace, &plan.p, &d), GCC_OK) << d.msg;
  EXPECT_EQ(Join(Verify(g.get(), nullptr, 0, plan.p)), "");
  EXPECT_EQ(plan.p.device_bytes[GCC_DEV_CPU], 192u);
  EXPECT_EQ(plan.p.device_bytes[GCC_DEV_CUDA(0)], 192u);
  for (int v = 0; v < g->n_values; v++) {
    if (g->values[v].kind == GCC_VALUE_ACTIVATION) {
      EXPECT_EQ(plan.p.offset[v], 0) << g->values[v].name;
    }
  }
}

// ---- the compiled reference models ------------------------------------------------

struct Compiled {
  gcc_graph *g = nullptr;
  gcc_mem_plan mem = {};
  ~Compiled() {
    gcc_mem_plan_free(&mem);
    gcc_graph_free(g);
  }
};

gcc_options Options(const gcc_graph *m, int device, gcc_mode mode) {
  gcc_options o = {};
  o.mode = mode;
  o.batch_size = 32;
  o.opt = m->training.opt;
  o.device = device;
  o.device_explicit = 1;
  o.n_cuda_devices = 1;
  static FILE *devnull = fopen("/dev/null", "w");
  o.warn_file = devnull;
  return o;
}

// The values the host reads after a step: the loss and (in eval) the
// prediction, through their host copies when they live on a GPU.
std::vector<int> HostReads(const gcc_graph *g, gcc_mode mode) {
  std::vector<int> out;
  std::vector<const char *> names = {g->training.loss};
  if (mode == GCC_MODE_EVAL)
    names.push_back(g->training.prediction);
  for (const char *name : names) {
    int v = gcc_graph_find(g, name);
    EXPECT_GE(v, 0) << name;
    if (v >= 0 && g->values[v].device != GCC_DEV_CPU)
      v = gcc_graph_find(g, (std::string(name) + "@cpu").c_str());
    EXPECT_GE(v, 0) << name << "@cpu";
    if (v >= 0)
      out.push_back(v);
  }
  return out;
}

TEST(MemplanModels, CompiledPlansAreValidAndKeepWhatTheHostReads) {
  gcc_graph *mlp = nullptr, *lin = nullptr, *cnn = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_mnist_mlp(GCC_MNIST_MLP_SEED, &mlp, &d), GCC_OK) << d.msg;
  GraphPtr mlp_g(mlp);
  ASSERT_EQ(gcc_model_linear(GCC_LINEAR_SEED, &lin, &d), GCC_OK) << d.msg;
  GraphPtr lin_g(lin);
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
  GraphPtr cnn_g(cnn); // convolutions: im2col workspaces on the CPU
  unsigned char disabled[GCC_OP_COUNT] = {};
  disabled[GCC_OP_RELU] = 1;
  for (const gcc_graph *model :
       {static_cast<const gcc_graph *>(mlp), static_cast<const gcc_graph *>(lin),
        static_cast<const gcc_graph *>(cnn)})
    for (int device : {GCC_DEV_CPU, GCC_DEV_CUDA(0)})
      for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL})
        for (int soft : {0, 1}) {
          SCOPED_TRACE(std::string(model->name) + (device ? " cuda" : " cpu") +
                       (mode == GCC_MODE_EVAL ? " eval" : " train") + (soft ? " soft" : ""));
          gcc_options o = Options(model, device, mode);
          if (soft)
            o.cuda_disabled = disabled;
          Compiled c;
          ASSERT_EQ(gcc_compile_graph(model, &o, &c.g, &c.mem, &d), GCC_OK) << d.msg;
          const gcc_graph *g = c.g;
          // the plan gcc_compile_graph made keeps live to the end of the step
          // the loss, the prediction and the values the host reads after the
          // step (their host copies on a GPU): those must not share bytes
          // with anything computed after them
          std::vector<int> reads = HostReads(g, mode);
          std::vector<int> keep = {gcc_graph_find(g, g->training.loss),
                                   gcc_graph_find(g, g->training.prediction)};
          keep.insert(keep.end(), reads.begin(), reads.end());
          EXPECT_EQ(Join(Verify(g, keep.data(), (int)keep.size(), c.mem)), "");
          for (int v : reads) {
            int r = c.mem.root[v];
            EXPECT_EQ(c.mem.last[r], g->n_nodes)
                << g->values[v].name << " is read after the step but its bytes are free from "
                << "node " << c.mem.last[r] + 1 << " on";
            EXPECT_GE(c.mem.offset[r], 0) << g->values[v].name;
          }
          for (size_t i = 0; i < reads.size(); i++)
            for (size_t j = i + 1; j < reads.size(); j++) {
              int u = c.mem.root[reads[i]], v = c.mem.root[reads[j]];
              if (DevOf(g, u) != DevOf(g, v))
                continue;
              int64_t su = AlignUp(gcc_shape_numel(&g->values[u].shape, nullptr) * 4);
              int64_t sv = AlignUp(gcc_shape_numel(&g->values[v].shape, nullptr) * 4);
              EXPECT_TRUE(c.mem.offset[u] + su <= c.mem.offset[v] ||
                          c.mem.offset[v] + sv <= c.mem.offset[u])
                  << g->values[u].name << " and " << g->values[v].name
                  << " are both read after the step but share bytes";
            }
          gcc_mem_plan &p = c.mem;
          if (device != GCC_DEV_CPU) {
            EXPECT_EQ(p.n_devices, 2);
            EXPECT_GT(p.device_bytes[GCC_DEV_CUDA(0)], 0u);
          }
        }
}

// Finishes builder b's classifier: the loss is the cross-entropy of logits
// against the int64 labels y (inputs "x" and "y"), prediction the value so
// named, SGD at 0.1, batch 32, one epoch; NULL (and a test failure) on error.
gcc_graph *FinishClassifier(gcc_builder *b, int logits, int y, const char *prediction) {
  int loss = gcc_build_cross_entropy(b, "loss", logits, y, -1);
  gcc_build_output(b, loss);
  gcc_build_training_spec ts = {};
  ts.loss = "loss";
  ts.prediction = prediction;
  ts.input = "x";
  ts.target = "y";
  ts.opt.kind = GCC_OPT_SGD;
  ts.opt.lr = 0.1f;
  ts.batch_size = 32;
  ts.epochs = 1;
  ts.seed = 5;
  gcc_build_training(b, &ts);
  gcc_graph *raw = nullptr;
  gcc_diag d = {};
  EXPECT_EQ(gcc_builder_finish(b, &raw, &d), GCC_OK) << d.msg;
  return raw;
}

// Dropout (issue 15) on both devices, in training (Dropout and DropoutGrad
// kernels of their own, the mask redrawn in the backward) and evaluation
// (the identity, fused on a GPU): the plans pass the verifier.
TEST(MemplanModels, DropoutPlansAreValid) {
  gcc_builder *b = gcc_builder_new("dropout_mlp", 3);
  int64_t xd[2] = {GCC_BATCH_DIM, 12}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_INT64, 1, yd);
  int h = gcc_build_relu(b, "relu1", gcc_build_linear(b, "fc1", x, 12, 16));
  h = gcc_build_op(b, GCC_OP_DROPOUT, "drop1", "drop1.out", &h, 1);
  gcc_build_set_float(b, h, "ratio", 0.5f);
  int logits = gcc_build_linear(b, "fc2", h, 16, 4);
  gcc_graph *raw = FinishClassifier(b, logits, y, "fc2.out");
  ASSERT_NE(raw, nullptr);
  GraphPtr model(raw);
  gcc_diag d = {};
  for (int device : {GCC_DEV_CPU, GCC_DEV_CUDA(0)})
    for (gcc_mode mode : {GCC_MODE_TRAIN, GCC_MODE_EVAL}) {
      SCOPED_TRACE(std::string(device ? "cuda" : "cpu") +
                   (mode == GCC_MODE_EVAL ? " eval" : " train"));
      gcc_options o = Options(raw, device, mode);
      Compiled c;
      ASSERT_EQ(gcc_compile_graph(raw, &o, &c.g, &c.mem, &d), GCC_OK) << d.msg;
      const gcc_graph *g = c.g;
      int drops = 0, grads = 0;
      for (int i = 0; i < g->n_nodes; i++) {
        drops += g->nodes[i].op == GCC_OP_DROPOUT;
        grads += g->nodes[i].op == GCC_OP_DROPOUT_GRAD;
      }
      // in evaluation the Dropout is removed (autodiff's Dropout
      // elimination): fc2 reads the ReLU's output
      EXPECT_EQ(drops, mode == GCC_MODE_TRAIN ? 1 : 0);
      EXPECT_EQ(grads, mode == GCC_MODE_TRAIN ? 1 : 0);
      if (mode == GCC_MODE_EVAL)
        for (int i = 0; i < g->n_nodes; i++)
          if (!strcmp(g->nodes[i].name, "fc2")) {
            EXPECT_STREQ(g->values[g->nodes[i].inputs[0]].name, "relu1.out");
          }
      std::vector<int> keep = HostReads(g, mode);
      keep.push_back(gcc_graph_find(g, g->training.loss));
      keep.push_back(gcc_graph_find(g, g->training.prediction));
      EXPECT_EQ(Join(Verify(g, keep.data(), (int)keep.size(), c.mem)), "");
    }
}

// A Dropout whose output is the training spec's prediction keeps its node in
// evaluation (the trainer finds the prediction by name), as one writing a
// graph output would; a second one behind it, read by nothing named, goes.
TEST(MemplanModels, EvaluationKeepsADropoutWhoseOutputIsNamed) {
  gcc_builder *b = gcc_builder_new("dropout_pred", 3);
  int64_t xd[2] = {GCC_BATCH_DIM, 12}, yd[1] = {GCC_BATCH_DIM};
  int x = gcc_build_input(b, "x", GCC_DT_FLOAT32, 2, xd);
  int y = gcc_build_input(b, "y", GCC_DT_INT64, 1, yd);
  int h = gcc_build_op(b, GCC_OP_DROPOUT, "drop0", "drop0.out", &x, 1);
  gcc_build_set_float(b, h, "ratio", 0.1f);
  int logits = gcc_build_linear(b, "fc", h, 12, 4);
  logits = gcc_build_op(b, GCC_OP_DROPOUT, "drop1", "drop1.out", &logits, 1);
  gcc_build_set_float(b, logits, "ratio", 0.5f);
  gcc_graph *raw = FinishClassifier(b, logits, y, "drop1.out");
  ASSERT_NE(raw, nullptr);
  GraphPtr model(raw);
  gcc_diag d = {};
  gcc_options o = Options(raw, GCC_DEV_CPU, GCC_MODE_EVAL);
  Compiled c;
  ASSERT_EQ(gcc_compile_graph(raw, &o, &c.g, &c.mem, &d), GCC_OK) << d.msg;
  std::vector<std::string> drops;
  for (int i = 0; i < c.g->n_nodes; i++)
    if (c.g->nodes[i].op == GCC_OP_DROPOUT)
      drops.push_back(c.g->nodes[i].name);
  EXPECT_EQ(drops, std::vector<std::string>{"drop1"});
  std::vector<int> keep = HostReads(c.g, GCC_MODE_EVAL);
  EXPECT_EQ(Join(Verify(c.g, keep.data(), (int)keep.size(), c.mem)), "");
}

// Conv workspaces: one per CPU convolution node, sized by the op, and the
// verifier catches one moved onto a live value or resized.
TEST(MemplanModels, ConvWorkspacesArePlannedAndCheckedByTheVerifier) {
  gcc_graph *cnn = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_cifar_cnn(GCC_CIFAR_CNN_SEED, &cnn, &d), GCC_OK) << d.msg;
  GraphPtr cnn_g(cnn);
  gcc_options o = Options(cnn, GCC_DEV_CPU, GCC_MODE_TRAIN);
  Compiled c;
  ASSERT_EQ(gcc_compile_graph(cnn, &o, &c.g, &c.mem, &d), GCC_OK) << d.msg;
  const gcc_graph *g = c.g;
  int with_ws = 0, conv2 = -1;
  for (int i = 0; i < g->n_nodes; i++) {
    int op = g->nodes[i].op;
    bool conv = op == GCC_OP_CONV || op == GCC_OP_CONV_GRAD_DATA || op == GCC_OP_CONV_GRAD_FILTER;
    EXPECT_EQ(c.mem.ws_bytes[i] > 0, conv) << g->nodes[i].name;
    with_ws += c.mem.ws_bytes[i] > 0;
    if (std::string(g->nodes[i].name) == "conv2")
      conv2 = i;
  }
  EXPECT_EQ(with_ws, 5); // conv1, conv1/dW, conv2, conv2/dX, conv2/dW
  ASSERT_GE(conv2, 0);
  // gcc_compile_graph keeps the loss and the prediction live to the end
  std::vector<int> keep = {gcc_graph_find(g, g->training.loss),
                           gcc_graph_find(g, g->training.prediction)};
  ASSERT_EQ(Join(Verify(g, keep.data(), 2, c.mem)), "");
  // conv2's workspace onto conv2's input, which is live during conv2
  int64_t saved = c.mem.ws_offset[conv2];
  c.mem.ws_offset[conv2] = c.mem.offset[c.mem.root[g->nodes[conv2].inputs[0]]];
  EXPECT_NE(Join(Verify(g, keep.data(), 2, c.mem)), "");
  c.mem.ws_offset[conv2] = saved;
  c.mem.ws_bytes[conv2] -= GCC_ARENA_ALIGN;
  EXPECT_NE(Join(Verify(g, keep.data(), 2, c.mem)), "");
}

} // namespace

// ---- the interval planner on random liveness patterns -------------------------

// What gcc_plan_intervals must satisfy, checked by brute force over every
// pair: blocks whose closed intervals overlap share no byte; offsets are
// aligned and >= 0; the peak is the highest end, at least the bytes live at
// any one point and at most the sum of all.
std::vector<std::string> VerifyIntervals(const std::vector<gcc_mem_interval> &iv,
                                         const std::vector<int64_t> &off, size_t peak) {
  std::vector<std::string> bad;
  int64_t top = 0, sum = 0;
  std::map<int, int64_t> delta;
  for (size_t i = 0; i < iv.size(); i++) {
    const int64_t sz = static_cast<int64_t>(iv[i].bytes);
    if (off[i] < 0 || off[i] % GCC_ARENA_ALIGN != 0)
      bad.push_back("block " + std::to_string(i) + ": offset " + std::to_string(off[i]));
    top = std::max(top, off[i] + sz);
    sum += sz;
    delta[iv[i].first] += sz;
    delta[iv[i].last + 1] -= sz;
    for (size_t j = 0; j < i && bad.size() < 20; j++) {
      if (iv[i].first > iv[j].last || iv[j].first > iv[i].last)
        continue;
      if (off[i] < off[j] + static_cast<int64_t>(iv[j].bytes) && off[j] < off[i] + sz)
        bad.push_back("blocks " + std::to_string(j) + " and " + std::to_string(i) +
                      " are live together and share bytes");
    }
  }
  int64_t live = 0, live_peak = 0;
  for (const auto &e : delta) {
    live += e.second;
    live_peak = std::max(live_peak, live);
  }
  if (static_cast<int64_t>(peak) != top)
    bad.push_back("peak " + std::to_string(peak) + " != highest end " + std::to_string(top));
  if (static_cast<int64_t>(peak) < live_peak || static_cast<int64_t>(peak) > sum)
    bad.push_back("peak " + std::to_string(peak) + " outside [" + std::to_string(live_peak) + ", " +
                  std::to_string(sum) + "]");
  return bad;
}

// Many random patterns: short lives (inference), nested long ones (saved
// activations and their gradients), everything live together, workspaces
// of one step, equal and varied sizes; every plan against the brute-force
// check, and the sweep check of large plans (SweepOverlaps) agreeing with
// it, also on plans broken on purpose.
TEST(MemplanIntervals, RandomLivenessPatternsAgainstBruteForce) {
  std::mt19937_64 rng(20261126);
  int checked = 0, reused = 0, broken_caught = 0;
  for (int iter = 0; iter < 600; iter++) {
    const int shape = iter % 6;
    const int n = 1 + static_cast<int>(rng() % (iter % 10 == 9 ? 1500 : 120));
    const int horizon = 1 + static_cast<int>(rng() % (2 * n + 2));
    std::vector<gcc_mem_interval> iv(n);
    for (int i = 0; i < n; i++) {
      int first = static_cast<int>(rng() % horizon) - 1, len;
      switch (shape) {
      case 0: len = static_cast<int>(rng() % 3); break;              // chains
      case 1: first = i - 1, len = 2 * (n - i); break;               // forward + backward
      case 2: first = -1, len = horizon; break;                      // all live together
      case 3: len = 0; break;                                        // workspaces
      default: len = static_cast<int>(rng() % (horizon + 1)); break; // anything
      }
      size_t bytes = GCC_ARENA_ALIGN * (shape == 1 ? 4 : 1 + rng() % (rng() % 2 ? 4 : 4000));
      if (rng() % 50 == 0)
        bytes = 0; // an empty block: takes no space
      iv[i] = {bytes, first, first + len};
    }
    std::vector<int64_t> off(n, -7);
    size_t peak = 0;
    gcc_diag d = {};
    ASSERT_EQ(gcc_plan_intervals(iv.data(), n, off.data(), &peak, &d), GCC_OK) << d.msg;
    std::vector<std::string> bad = VerifyIntervals(iv, off, peak);
    ASSERT_EQ(Join(bad), "") << "pattern " << iter << " (shape " << shape << ", " << n
                             << " blocks)";
    auto sweep = [&](const std::vector<int64_t> &o) {
      return SweepOverlaps(iv.size(), [&](size_t i) {
        return SweepBlock{o[i], static_cast<int64_t>(iv[i].bytes), iv[i].first, iv[i].last, 0};
      });
    };
    EXPECT_EQ(Join(sweep(off)), "") << "pattern " << iter;
    checked++;
    int64_t sum = 0;
    for (const auto &b : iv)
      sum += static_cast<int64_t>(b.bytes);
    reused += static_cast<int64_t>(peak) < sum;
    // break it: put a block onto another one live at the same time
    for (int tries = 0; tries < 4 && n > 1; tries++) {
      int i = static_cast<int>(rng() % n), j = static_cast<int>(rng() % n);
      if (i == j || iv[i].first > iv[j].last || iv[j].first > iv[i].last || !iv[i].bytes ||
          !iv[j].bytes)
        continue;
      std::vector<int64_t> moved = off;
      moved[i] = off[j];
      bool brute =
          !VerifyIntervals(iv, moved, std::max<int64_t>(peak, moved[i] + iv[i].bytes)).empty();
      bool swept = !sweep(moved).empty();
      EXPECT_TRUE(brute) << "pattern " << iter;
      EXPECT_EQ(swept, brute) << "pattern " << iter;
      broken_caught += brute && swept;
      break;
    }
  }
  EXPECT_EQ(checked, 600);
  EXPECT_GT(reused, 300);
  EXPECT_GT(broken_caught, 200);
}

// A pattern past greedy by size's budget of overlapping pairs (3,000 blocks
// all live together, 4.5 M pairs): the sweep's plan, still valid and as
// tight as the bytes live at once.
TEST(MemplanIntervals, EverythingLiveTogetherPastTheGreedyBudget) {
  const int n = 3000;
  std::vector<gcc_mem_interval> iv(n);
  for (int i = 0; i < n; i++)
    iv[i] = {static_cast<size_t>(GCC_ARENA_ALIGN * (1 + i % 7)), i, 2 * n - i};
  std::vector<int64_t> off(n);
  size_t peak = 0;
  gcc_diag d = {};
  ASSERT_EQ(gcc_plan_intervals(iv.data(), n, off.data(), &peak, &d), GCC_OK) << d.msg;
  EXPECT_EQ(Join(VerifyIntervals(iv, off, peak)), "");
  size_t sum = 0;
  for (const auto &b : iv)
    sum += b.bytes;
  EXPECT_EQ(peak, sum); // all live at n: nothing can share
}

// The 100,000-node ReLU chain (issue 16: compile time was quadratic in the
// node count) compiles for inference and training and its plan passes the
// verifier. No timing here: bench/compile_bench measures it.
TEST(MemplanModels, HundredThousandNodeReluChain) {
  gcc_graph *m = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_model_relu_chain(100000, 1, &m, &d), GCC_OK) << d.msg;
  GraphPtr model(m);
  for (gcc_mode mode : {GCC_MODE_EVAL, GCC_MODE_TRAIN}) {
    SCOPED_TRACE(mode == GCC_MODE_EVAL ? "eval" : "train");
    gcc_options o = Options(m, GCC_DEV_CPU, mode);
    Compiled c;
    ASSERT_EQ(gcc_compile_graph(m, &o, &c.g, &c.mem, &d), GCC_OK) << d.msg;
    const gcc_graph *g = c.g;
    EXPECT_GE(g->n_nodes, mode == GCC_MODE_EVAL ? 100001 : 200001);
    std::vector<int> keep = {gcc_graph_find(g, g->training.loss),
                             gcc_graph_find(g, g->training.prediction)};
    EXPECT_EQ(Join(Verify(g, keep.data(), (int)keep.size(), c.mem)), "");
    // inference reuses: two activations of 32x16 floats at a time (the Gemm's
    // output and the first ReLU's, then pairs of ReLUs) and the loss
    if (mode == GCC_MODE_EVAL) {
      EXPECT_LE(c.mem.arena_bytes, 4u * 32 * 16 * 4);
    }
  }
}
