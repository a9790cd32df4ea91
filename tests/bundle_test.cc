// The .gccx bundle (deploy/bundle.h): the inference graph, export, the
// checked reader against corrupt, truncated, bit-flipped, wrong-magic,
// future-version, missing-section and inconsistent files (every case must
// be rejected with a message naming the file and, where one is at fault,
// the section; none may crash: run under ASan too), the kernel image
// choice by the CUDA binary compatibility rules with its mismatch message,
// --export-archs parsing, and the float32 .npy reader.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/loader.h"
#include "graph/ops.h"
#include "deploy/bundle.h"
#include "deploy/export.h"
#include "deploy/bundle_internal.h"
#include "datasets/npy.h"
#include "tests/testutil.h"

using namespace gcc_test; // tests/testutil.h

namespace {

// One bundle of the MNIST MLP (its committed initial weights), cubins for
// sm_80 and sm_90 at batch sizes 1 and 1000 (the defaults), exported once for
// the whole suite.
class BundleTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    std::string model = Runfile("models/mnist_mlp.pb");
    ASSERT_FALSE(model.empty());
    gcc_diag d = {};
    ASSERT_EQ(gcc_model_load(model.c_str(), &model_, &d), GCC_OK) << d.msg;
    gcc_export_options o = {};
    o.archs[0] = 80;
    o.archs[1] = 90;
    o.n_archs = 2;
    o.use_kernel_cache = 0;
    o.created = 1795000000;
    path_ = TmpPath("mlp.gccx");
    ASSERT_EQ(gcc_export_bundle(model_, &o, path_.c_str(), &d), GCC_OK) << d.msg;
    bytes_ = ReadBytes(path_);
    ASSERT_GT(bytes_.size(), 1000000u);
  }
  static void TearDownTestSuite() {
    gcc_graph_free(model_);
    model_ = nullptr;
  }

  // Parses `b`; returns the status and the message.
  static gcc_status Parse(const std::vector<uint8_t> &b, std::string *msg) {
    gcc_diag d = {};
    gcc_bundle *out = nullptr;
    gcc_status s = gcc_bundle_parse(b.data(), b.size(), "test.gccx", &out, &d);
    if (s == GCC_OK) {
      EXPECT_NE(out, nullptr);
    } else {
      EXPECT_EQ(out, nullptr);
      EXPECT_NE(strstr(d.msg, "test.gccx"), nullptr) << "the message must name the file: " << d.msg;
    }
    gcc_bundle_free(out);
    if (msg)
      *msg = d.msg;
    return s;
  }

  // The sections of the good bundle, in file order.
  struct Sec {
    std::string name;
    std::vector<uint8_t> data;
  };
  static std::vector<Sec> Sections() {
    std::vector<Sec> v;
    gcc_diag d = {};
    gcc_bundle *b = nullptr;
    EXPECT_EQ(gcc_bundle_parse(bytes_.data(), bytes_.size(), "good", &b, &d), GCC_OK) << d.msg;
    const char *names[] = {"manifest",
                           "graph",
                           "weights",
                           "plan.cpu",
                           "plan.sm_80.b1",
                           "kernels.sm_80.b1",
                           "cubin.sm_80.b1",
                           "plan.sm_90.b1",
                           "kernels.sm_90.b1",
                           "cubin.sm_90.b1",
                           "ptx.b1",
                           "source.b1",
                           "plan.sm_80.b1000",
                           "kernels.sm_80.b1000",
                           "cubin.sm_80.b1000",
                           "plan.sm_90.b1000",
                           "kernels.sm_90.b1000",
                           "cubin.sm_90.b1000",
                           "ptx.b1000",
                           "source.b1000"};
    for (const char *n : names) {
      const void *p;
      size_t size;
      EXPECT_EQ(gcc_bundle_section(b, n, &p, &size, &d), GCC_OK) << n;
      const uint8_t *u = static_cast<const uint8_t *>(p);
      v.push_back({n, std::vector<uint8_t>(u, u + size)});
    }
    gcc_bundle_free(b);
    return v;
  }
  static std::vector<uint8_t> Pack(const std::vector<Sec> &secs) {
    std::vector<gcc_bundle_section_ref> refs;
    for (const Sec &s : secs)
      refs.push_back({s.name.c_str(), s.data.data(), s.data.size()});
    uint8_t *bytes = nullptr;
    size_t size = 0;
    gcc_diag d = {};
    EXPECT_EQ(gcc_bundle_pack(refs.data(), static_cast<int>(refs.size()), &bytes, &size, &d),
              GCC_OK);
    std::vector<uint8_t> out(bytes, bytes + size);
    free(bytes);
    return out;
  }

  static gcc_graph *model_;
  static std::string path_;
  static std::vector<uint8_t> bytes_;
};
gcc_graph *BundleTest::model_ = nullptr;
std::string BundleTest::path_;
std::vector<uint8_t> BundleTest::bytes_;

TEST_F(BundleTest, InferenceGraphHasNoLossAndTwoOutputs) {
  gcc_diag d = {};
  gcc_graph *g = nullptr;
  ASSERT_EQ(gcc_inference_graph(model_, &g, &d), GCC_OK) << d.msg;
  EXPECT_FALSE(g->training.present);
  ASSERT_EQ(g->n_inputs, 1);
  EXPECT_STREQ(g->values[g->inputs[0]].name, "image");
  ASSERT_EQ(g->n_outputs, 2);
  EXPECT_STREQ(g->values[g->outputs[0]].name, "logits");
  EXPECT_STREQ(g->values[g->outputs[1]].name, "probabilities");
  int softmax = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gcc_op_desc *op = gcc_op(g->nodes[i].op);
    EXPECT_FALSE(op->flags & (GCC_OPF_LOSS | GCC_OPF_OPTIMIZER)) << g->nodes[i].name;
    EXPECT_EQ(g->nodes[i].phase, GCC_PHASE_FORWARD);
    softmax += g->nodes[i].op == GCC_OP_SOFTMAX;
  }
  EXPECT_EQ(softmax, 1);
  gcc_graph_free(g);
}

TEST_F(BundleTest, InferenceGraphNeedsAPrediction) {
  gcc_diag d = {};
  gcc_graph *m = nullptr, *g = nullptr;
  ASSERT_EQ(gcc_graph_clone(model_, &m, &d), GCC_OK);
  m->training.present = 0;
  EXPECT_EQ(gcc_inference_graph(m, &g, &d), GCC_ERR_INVALID_GRAPH);
  EXPECT_NE(strstr(d.msg, "prediction"), nullptr) << d.msg;
  EXPECT_EQ(g, nullptr);
  gcc_graph_free(m);
}

TEST_F(BundleTest, RoundTripManifestAndSections) {
  gcc_diag d = {};
  gcc_bundle *b = nullptr;
  ASSERT_EQ(gcc_bundle_read(path_.c_str(), &b, &d), GCC_OK) << d.msg;
  const gcc_bundle_info *i = gcc_bundle_get_info(b);
  // a float32 export keeps format version 1, which older readers read
  EXPECT_EQ(i->format_version, GCC_BUNDLE_FORMAT_VERSION_MIN);
  EXPECT_EQ(i->format_version, 1u);
  EXPECT_EQ(i->precision, GCC_PRECISION_FP32);
  EXPECT_EQ(i->n_weights_16bit, 0);
  EXPECT_EQ(i->n_weight_tensors, 10);
  EXPECT_EQ(i->weight_bytes, i->weight_bytes_fp32);
  EXPECT_EQ(i->weight_bytes, 4u * 575050); // fc1..fc5 weights and biases
  EXPECT_STREQ(i->gcc_train_version, GCC_TRAIN_VERSION);
  EXPECT_STREQ(i->created, "2026-11-18T11:06:40Z");
  EXPECT_STREQ(i->input.name, "image");
  EXPECT_EQ(i->input.shape.ndim, 4);
  EXPECT_EQ(i->input.shape.dims[0], -1);
  EXPECT_EQ(i->input.shape.dims[3], 28);
  EXPECT_STREQ(i->outputs[1].name, "probabilities");
  EXPECT_EQ(i->outputs[1].shape.dims[1], 10);
  ASSERT_EQ(i->n_mean, 1);
  EXPECT_FLOAT_EQ(i->mean[0], model_->training.mean[0]);
  EXPECT_FLOAT_EQ(i->std[0], model_->training.std[0]);
  ASSERT_EQ(i->n_cubin_archs, 2);
  EXPECT_EQ(i->cubin_archs[0], 80);
  EXPECT_EQ(i->cubin_archs[1], 90);
  EXPECT_EQ(i->ptx_arch, 90);
  ASSERT_EQ(i->n_batch_sizes, 2);
  EXPECT_EQ(i->batch_sizes[0], 1);
  EXPECT_EQ(i->batch_sizes[1], 1000);
  EXPECT_EQ(gcc_bundle_batch_for(b, 1), 1);
  EXPECT_EQ(gcc_bundle_batch_for(b, 2), 1000);
  EXPECT_EQ(gcc_bundle_batch_for(b, 1000), 1000);
  EXPECT_EQ(gcc_bundle_batch_for(b, 1001), 0);
  // the weights came through bit for bit
  const gcc_graph *g = gcc_bundle_graph(b);
  int checked = 0;
  for (int v = 0; v < model_->n_values; v++) {
    if (model_->values[v].kind != GCC_VALUE_PARAM)
      continue;
    int w = gcc_graph_find(g, model_->values[v].name);
    ASSERT_GE(w, 0) << model_->values[v].name;
    ASSERT_EQ(g->values[w].data_bytes, model_->values[v].data_bytes);
    EXPECT_EQ(memcmp(g->values[w].data, model_->values[v].data, model_->values[v].data_bytes), 0);
    checked++;
  }
  EXPECT_EQ(checked, 10);
  const void *p;
  size_t n;
  ASSERT_EQ(gcc_bundle_section(b, "cubin.sm_90.b1000", &p, &n, &d), GCC_OK);
  EXPECT_EQ(memcmp(p,
                   "\x7f"
                   "ELF",
                   4),
            0);
  EXPECT_EQ(gcc_bundle_section(b, "cubin.sm_70", &p, &n, &d), GCC_ERR_INVALID_ARGUMENT);
  EXPECT_NE(strstr(d.msg, "cubin.sm_70"), nullptr);
  gcc_bundle_free(b);
}

TEST_F(BundleTest, EveryTruncationIsRejected) {
  std::vector<size_t> cuts;
  for (size_t k = 0; k < 64; k++)
    cuts.push_back(k);
  for (size_t k = 1; k < 160; k++)
    cuts.push_back(bytes_.size() * k / 160);
  cuts.push_back(bytes_.size() - 1);
  for (size_t cut : cuts) {
    std::vector<uint8_t> t(bytes_.begin(), bytes_.begin() + static_cast<long>(cut));
    std::string msg;
    EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE) << "cut at " << cut << ": " << msg;
    if (cut >= GCC_BUNDLE_HEADER_BYTES) {
      EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
    }
  }
}

TEST_F(BundleTest, EveryBitFlipIsRejected) {
  std::vector<size_t> offsets;
  for (size_t k = 0; k < 96; k++)
    offsets.push_back(k); // header and the first fields
  for (size_t k = 0; k < 200; k++)
    offsets.push_back(96 + (bytes_.size() - 97) * k / 199);
  int n = 0;
  for (size_t off : offsets) {
    std::vector<uint8_t> t = bytes_;
    t[off] ^= static_cast<uint8_t>(1u << (off % 8));
    std::string msg;
    gcc_status s = Parse(t, &msg);
    EXPECT_NE(s, GCC_OK) << "bit " << off % 8 << " of byte " << off << " flipped and accepted";
    n++;
  }
  EXPECT_EQ(n, 296);
}

TEST_F(BundleTest, ChecksumMismatchNamesTheSection) {
  // a byte inside the weights' float data, and one inside the manifest text
  std::vector<uint8_t> t = bytes_;
  t[t.size() / 2] ^= 0x40;
  std::string msg;
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'weights' is corrupt"), std::string::npos) << msg;
  const char *key = "\"gcc_train_version\"";
  auto it = std::search(bytes_.begin(), bytes_.end(), key, key + strlen(key));
  ASSERT_NE(it, bytes_.end());
  t = bytes_;
  t[static_cast<size_t>(it - bytes_.begin()) + 2] ^= 0x01;
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'manifest' is corrupt"), std::string::npos) << msg;
}

TEST_F(BundleTest, WrongMagicFutureVersionReservedAndTrailingBytes) {
  std::string msg;
  std::vector<uint8_t> t = bytes_;
  memcpy(t.data(), "PK\x03\x04", 4);
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("not a .gccx bundle (wrong magic"), std::string::npos) << msg;
  t = bytes_;
  t[8] = 4; // format version 4 (3 is a tensor bundle)
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("bundle format version 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("reads versions 1 to 3"), std::string::npos) << msg;
  t[8] = 0;
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("bundle format version 0"), std::string::npos) << msg;
  t[8] = 2; // a version this reads, but not the manifest's
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("manifest: format_version 1 differs from the header's 2"), std::string::npos)
      << msg;
  t = bytes_;
  t[13] = 1;
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  t = bytes_;
  t.push_back(0);
  EXPECT_EQ(Parse(t, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("trailing bytes"), std::string::npos) << msg;
  EXPECT_EQ(Parse({}, &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("shorter than the 24-byte header"), std::string::npos) << msg;
}

TEST_F(BundleTest, MissingSectionIsNamed) {
  std::vector<Sec> secs = Sections();
  ASSERT_EQ(Parse(Pack(secs), nullptr), GCC_OK); // repacking the same sections is fine
  for (size_t drop = 0; drop < secs.size(); drop++) {
    std::vector<Sec> s = secs;
    std::string name = s[drop].name;
    s.erase(s.begin() + static_cast<long>(drop));
    std::string msg;
    EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_PARSE) << name;
    EXPECT_NE(msg.find("missing section '" + name + "'"), std::string::npos) << msg;
  }
}

TEST_F(BundleTest, SectionsMustAgreeWithTheManifest) {
  std::vector<Sec> secs = Sections();
  std::string msg;
  // a section whose own checksum is right but whose bytes are not the
  // ones the manifest lists (swapped in by someone who recomputed it)
  std::vector<Sec> s = secs;
  s[3].data.push_back(' ');
  EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'plan.cpu'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("differs from the manifest"), std::string::npos) << msg;
  // a section the manifest does not list
  s = secs;
  s.push_back({"extra", {1, 2, 3}});
  EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'extra' is not listed"), std::string::npos) << msg;
  // the same section twice
  s = secs;
  s.push_back(secs[5]);
  EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
  // a manifest that is not JSON
  s = secs;
  s[0].data = {'{', 'x'};
  EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_PARSE);
  EXPECT_NE(msg.find("section 'manifest' is not JSON"), std::string::npos) << msg;
  // a manifest from a future format
  s = secs;
  std::string m(s[0].data.begin(), s[0].data.end());
  size_t at = m.find("\"format_version\": 1");
  ASSERT_NE(at, std::string::npos);
  m.replace(at, 19, "\"format_version\": 7");
  s[0].data.assign(m.begin(), m.end());
  EXPECT_EQ(Parse(Pack(s), &msg), GCC_ERR_UNSUPPORTED);
  EXPECT_NE(msg.find("manifest: bundle format version 7"), std::string::npos) << msg;
  // weights of another model: the loader's own checks run on the result
  s = secs;
  s[2].data.resize(s[2].data.size() / 2);
  EXPECT_NE(Parse(Pack(s), &msg), GCC_OK);
}

TEST_F(BundleTest, MissingFileIsAnIoError) {
  gcc_diag d = {};
  gcc_bundle *b = nullptr;
  EXPECT_EQ(gcc_bundle_read("/nonexistent/x.gccx", &b, &d), GCC_ERR_IO);
  EXPECT_NE(strstr(d.msg, "/nonexistent/x.gccx"), nullptr);
}

// ---- the kernel image ------------------------------------------------------

gcc_kernel_image Select(std::vector<int> cubins, int ptx, int dev, gcc_status want = GCC_OK,
                        std::string *msg = nullptr) {
  gcc_kernel_image img = {GCC_IMAGE_PTX, -1};
  gcc_diag d = {};
  EXPECT_EQ(gcc_kernel_image_select(cubins.data(), static_cast<int>(cubins.size()), ptx, dev,
                                    "cuda:0 (test GPU)", &img, &d),
            want)
      << d.msg;
  if (msg)
    *msg = d.msg;
  return img;
}

TEST(KernelImage, CubinOfTheSameMajorAndAnOlderOrEqualMinor) {
  gcc_kernel_image i = Select({80, 90}, 90, 90);
  EXPECT_EQ(i.kind, GCC_IMAGE_CUBIN);
  EXPECT_EQ(i.arch, 90);
  i = Select({80, 90}, 90, 86); // A10: sm_80 SASS runs on sm_86
  EXPECT_EQ(i.kind, GCC_IMAGE_CUBIN);
  EXPECT_EQ(i.arch, 80);
  i = Select({80, 86, 90}, 90, 89); // the newest compatible minor wins
  EXPECT_EQ(i.kind, GCC_IMAGE_CUBIN);
  EXPECT_EQ(i.arch, 86);
  i = Select({86}, 0, 86);
  EXPECT_EQ(i.kind, GCC_IMAGE_CUBIN);
}

TEST(KernelImage, PtxForNewerArchitectures) {
  gcc_kernel_image i = Select({80, 90}, 90, 100); // Blackwell: no sm_10x cubin, JIT the PTX
  EXPECT_EQ(i.kind, GCC_IMAGE_PTX);
  EXPECT_EQ(i.arch, 90);
  i = Select({80, 90}, 90, 120);
  EXPECT_EQ(i.kind, GCC_IMAGE_PTX);
  i = Select({}, 80, 86);
  EXPECT_EQ(i.kind, GCC_IMAGE_PTX);
  EXPECT_EQ(i.arch, 80);
  i = Select({86}, 80, 80); // a cubin for a newer minor does not run: PTX instead
  EXPECT_EQ(i.kind, GCC_IMAGE_PTX);
}

TEST(KernelImage, MismatchMessageNamesBothSides) {
  std::string msg;
  Select({80, 90}, 90, 75, GCC_ERR_UNSUPPORTED, &msg);
  EXPECT_EQ(msg,
            "bundle has cubin for sm_80, sm_90 and PTX for compute_90; device cuda:0 (test GPU) "
            "is sm_75: no cubin for sm_7x with a minor <= 5, and PTX for compute_90 needs sm_90 "
            "or newer. Re-export with --export-archs including sm_75");
  Select({90}, 0, 100, GCC_ERR_UNSUPPORTED, &msg);
  EXPECT_NE(msg.find("bundle has cubin for sm_90 and no PTX"), std::string::npos) << msg;
  EXPECT_NE(msg.find("there is no PTX to JIT-compile"), std::string::npos) << msg;
  Select({}, 0, 90, GCC_ERR_UNSUPPORTED, &msg);
  EXPECT_NE(msg.find("bundle has no cubin and no PTX"), std::string::npos) << msg;
  Select({80}, 0, 0, GCC_ERR_INVALID_ARGUMENT, &msg);
}

TEST_F(BundleTest, KernelImageHookReturnsTheBytes) {
  gcc_diag d = {};
  gcc_bundle *b = nullptr;
  ASSERT_EQ(gcc_bundle_parse(bytes_.data(), bytes_.size(), "hook", &b, &d), GCC_OK) << d.msg;
  gcc_kernel_image img;
  const void *p = nullptr;
  size_t n = 0;
  const char *launches = nullptr;
  ASSERT_EQ(gcc_bundle_kernel_image(b, 90, 1000, "cuda:0", &img, &p, &n, &launches, &d), GCC_OK);
  EXPECT_EQ(img.kind, GCC_IMAGE_CUBIN);
  EXPECT_EQ(memcmp(p,
                   "\x7f"
                   "ELF",
                   4),
            0);
  EXPECT_NE(strstr(launches, "gcc-train.kernels/1"), nullptr);
  // the first kernel of the launch manifest is in the cubin and the PTX,
  // compiled for 1000 rows
  std::string cubin(static_cast<const char *>(p), n), lj(launches);
  size_t k = lj.find("\"kernels\": [");
  ASSERT_NE(k, std::string::npos);
  size_t q = lj.find("\"name\": \"", k) + 9;
  std::string first = lj.substr(q, lj.find('"', q) - q);
  EXPECT_NE(cubin.find(first), std::string::npos) << first;
  EXPECT_NE(lj.find("1000,"), std::string::npos); // the logits' shape: [1000, 10]
  const void *p1;
  size_t n1;
  const char *l1;
  ASSERT_EQ(gcc_bundle_kernel_image(b, 90, 1, "cuda:0", &img, &p1, &n1, &l1, &d), GCC_OK);
  EXPECT_EQ(std::string(l1).find("1000,"), std::string::npos); // [1, 10]
  EXPECT_NE(p1, p);
  ASSERT_EQ(gcc_bundle_kernel_image(b, 103, 1000, "cuda:0", &img, &p, &n, &launches, &d), GCC_OK);
  EXPECT_EQ(img.kind, GCC_IMAGE_PTX);
  std::string ptx(static_cast<const char *>(p), n);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);
  EXPECT_NE(ptx.find(".entry " + first), std::string::npos) << first;
  EXPECT_EQ(strlen(static_cast<const char *>(p)), n); // NUL-terminated text
  EXPECT_EQ(gcc_bundle_kernel_image(b, 75, 1, "cuda:0 (NVIDIA T4)", &img, &p, &n, &launches, &d),
            GCC_ERR_UNSUPPORTED);
  EXPECT_NE(strstr(d.msg, "device cuda:0 (NVIDIA T4) is sm_75"), nullptr) << d.msg;
  EXPECT_EQ(gcc_bundle_kernel_image(b, 90, 64, "cuda:0", &img, &p, &n, &launches, &d),
            GCC_ERR_UNSUPPORTED);
  EXPECT_NE(strstr(d.msg, "CUDA kernels for batch sizes 1, 1000, not 64"), nullptr) << d.msg;
  gcc_bundle_free(b);
}

TEST(ExportArchs, ParsesSortsAndRejects) {
  gcc_export_options o = {};
  gcc_diag d = {};
  ASSERT_EQ(gcc_export_parse_archs("sm_90,sm_80,sm_86", &o, &d), GCC_OK) << d.msg;
  ASSERT_EQ(o.n_archs, 3);
  EXPECT_EQ(o.archs[0], 80);
  EXPECT_EQ(o.archs[1], 86);
  EXPECT_EQ(o.archs[2], 90);
  for (const char *bad :
       {"", "sm_8", "sm_80,", "sm_80,,sm_90", "compute_80", "sm80", "sm_80,sm_80", "sm_8x"}) {
    EXPECT_EQ(gcc_export_parse_archs(bad, &o, &d), GCC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(strstr(d.msg, "--export-archs"), nullptr) << d.msg;
  }
  EXPECT_EQ(gcc_export_parse_archs("sm_70", &o, &d), GCC_ERR_UNSUPPORTED); // NVRTC 13 dropped it
  EXPECT_NE(strstr(d.msg, "sm_70"), nullptr) << d.msg;
}

TEST(ExportBatchSizes, ParsesSortsAndRejects) {
  gcc_export_options o = {};
  gcc_diag d = {};
  ASSERT_EQ(gcc_export_parse_batch_sizes("1000,1,64", &o, &d), GCC_OK) << d.msg;
  ASSERT_EQ(o.n_batch_sizes, 3);
  EXPECT_EQ(o.batch_sizes[0], 1);
  EXPECT_EQ(o.batch_sizes[1], 64);
  EXPECT_EQ(o.batch_sizes[2], 1000);
  for (const char *bad : {"", "0", "-1", "1,", ",1", "1,,2", "1;2", "64,64", "2147483648", "x",
                          "1,2,3,4,5,6,7,8,9"}) {
    EXPECT_EQ(gcc_export_parse_batch_sizes(bad, &o, &d), GCC_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(strstr(d.msg, "--export-batch-sizes"), nullptr) << d.msg;
  }
}

// ---- .npy ---------------------------------------------------------------------

std::vector<uint8_t> Npy(const std::string &dict, size_t floats, int major = 1) {
  std::string h = dict;
  size_t pre = major == 1 ? 10 : 12;
  while ((pre + h.size() + 1) % 64)
    h += ' ';
  h += '\n';
  std::vector<uint8_t> b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<uint8_t>(major), 0};
  b.push_back(static_cast<uint8_t>(h.size()));
  b.push_back(static_cast<uint8_t>(h.size() >> 8));
  if (major != 1)
    b.insert(b.end(), {0, 0});
  b.insert(b.end(), h.begin(), h.end());
  for (size_t i = 0; i < floats; i++) {
    float f = 0.5f * static_cast<float>(i);
    uint8_t raw[4];
    memcpy(raw, &f, 4);
    b.insert(b.end(), raw, raw + 4);
  }
  return b;
}

TEST(Npy, ReadsFloat32InCOrder) {
  for (int major : {1, 2, 3}) {
    std::vector<uint8_t> b =
        Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6, major);
    gcc_shape s;
    float *data = nullptr;
    gcc_diag d = {};
    ASSERT_EQ(gcc_npy_parse_f32(b.data(), b.size(), "x.npy", &s, &data, &d), GCC_OK) << d.msg;
    EXPECT_EQ(s.ndim, 2);
    EXPECT_EQ(s.dims[0], 2);
    EXPECT_EQ(s.dims[1], 3);
    EXPECT_EQ(data[5], 2.5f);
    free(data);
  }
  std::vector<uint8_t> b = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", 4);
  gcc_shape s;
  float *data = nullptr;
  gcc_diag d = {};
  ASSERT_EQ(gcc_npy_parse_f32(b.data(), b.size(), "x.npy", &s, &data, &d), GCC_OK) << d.msg;
  EXPECT_EQ(s.ndim, 1);
  free(data);
}

TEST(Npy, RejectsWhatItCannotRead) {
  struct Case {
    std::vector<uint8_t> bytes;
    gcc_status want;
    const char *says;
  };
  std::vector<uint8_t> good = Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 6);
  std::vector<uint8_t> trunc(good.begin(), good.end() - 1), trail = good;
  trail.push_back(0);
  std::vector<uint8_t> magic = good;
  magic[1] = 'X';
  std::vector<uint8_t> version = good;
  version[6] = 4;
  std::vector<uint8_t> hdr(good.begin(), good.begin() + 40);
  const Case cases[] = {
      {Npy("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", 12), GCC_ERR_UNSUPPORTED,
       "'<f8'"},
      {Npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 6), GCC_ERR_UNSUPPORTED,
       "'>f4'"},
      {Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 6), GCC_ERR_UNSUPPORTED,
       "Fortran"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 0), }", 0), GCC_ERR_PARSE,
       "dim of 0"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1), GCC_ERR_UNSUPPORTED,
       "scalar"},
      {Npy("{'descr': '<f4', 'shape': (2, 3), }", 6), GCC_ERR_PARSE, "lacks"},
      {Npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", 6), GCC_ERR_PARSE,
       "'shape'"},
      {trunc, GCC_ERR_PARSE, "truncated"},
      {trail, GCC_ERR_PARSE, "trailing"},
      {magic, GCC_ERR_PARSE, "not a .npy"},
      {version, GCC_ERR_PARSE, "version 4.0"},
      {hdr, GCC_ERR_PARSE, "truncated .npy header"},
  };
  for (const Case &c : cases) {
    gcc_shape s;
    float *data = reinterpret_cast<float *>(&s);
    gcc_diag d = {};
    EXPECT_EQ(gcc_npy_parse_f32(c.bytes.data(), c.bytes.size(), "bad.npy", &s, &data, &d), c.want)
        << c.says << ": " << d.msg;
    EXPECT_EQ(data, nullptr);
    EXPECT_NE(strstr(d.msg, "bad.npy"), nullptr) << d.msg;
    EXPECT_NE(strstr(d.msg, c.says), nullptr) << d.msg;
  }
}

} // namespace
