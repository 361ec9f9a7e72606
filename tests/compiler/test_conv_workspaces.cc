// Measured convolution workspaces (training/conv_workspaces.h): a matching entry sets the
// forward and backward steps' workspaces, others keep the estimate, the PyTorch memory model
// counts what was measured, and a malformed file is refused with what is wrong.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

#include "analysis/pytorch_memory.h"
#include "analysis/lifetimes.h"
#include "model_builder.h"
#include "plan/gaps.h"
#include "plan/workspace_fit.h"
#include "training/training_step.h"
#include "util/error.h"

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::ints_attr;
using training::ConvWorkspaceTable;

namespace {

// conv1: 3x3, pads 1, on x [2, 3, 8, 8] -> a [2, 4, 8, 8]; conv2: 3x3 stride 2, pads 1,
// a -> y [2, 4, 4, 4]. Both estimated workspaces are the im2col matrix (f32).
ModelBuilder two_convs() {
  ModelBuilder b;
  b.input("x", {2, 3, 8, 8}).param("w1", {4, 3, 3, 3}).param("w2", {4, 4, 3, 3});
  std::map<std::string, model::Attribute> pad1 = {{"pads", ints_attr({1, 1, 1, 1})},
                                                  {"kernel_shape", ints_attr({3, 3})}};
  std::map<std::string, model::Attribute> stride2 = pad1;
  stride2["strides"] = ints_attr({2, 2});
  b.node("Conv", "conv1", {"x", "w1"}, {{"a", {2, 4, 8, 8}}}, pad1);
  b.node("Conv", "conv2", {"a", "w2"}, {{"y", {2, 4, 4, 4}}}, stride2);
  b.node("Flatten", "flat", {"y"}, {{"logits", {2, 64}}}).output("logits");
  return b;
}

int64_t workspace_of(const TrainingGraph& g, const std::string& node, const std::string& op) {
  for (const Step& s : g.steps)
    if (s.node == node && s.op == op) return s.workspace == kNoTensor ? 0 : g.tensor(s.workspace).bytes;
  FAIL("no step " << node << "/" << op);
  return -1;
}

std::string write_file(const std::string& text) {
  char name[] = "/tmp/autovm_convws_XXXXXX";
  int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  std::FILE* f = fdopen(fd, "w");
  std::fputs(text.c_str(), f);
  std::fclose(f);
  return name;
}

// conv2's entry as python/autovm/conv_workspaces.py writes it.
const char* kConv2 = R"({"op": "Conv", "dtype": "float32", "input": [2, 4, 8, 8], "weight": [4, 4, 3, 3],
  "output": [2, 4, 4, 4], "strides": [2, 2], "pads": [1, 1], "dilations": [1, 1], "group": 1,
  "forward_bytes": 1000000, "backward_bytes": 3000000})";

}  // namespace

TEST_CASE("a measured entry sets its convolution's workspaces; the others keep the estimate") {
  std::string path = write_file(std::string("{\"convolutions\": [") + kConv2 + "]}");
  training::TrainingOptions o;
  o.conv_workspaces = ConvWorkspaceTable::load(path);
  std::remove(path.c_str());
  auto ts = training::build_training_step(two_convs().m, o);
  const TrainingGraph& g = ts.graph;
  CHECK(ts.conv_workspaces_measured == 1);
  CHECK(workspace_of(g, "conv2", "Conv") == 1000000);
  CHECK(workspace_of(g, "conv2", "ConvGrad") == 3000000);
  // conv1 has no entry: im2col of N*Ho*Wo x Cin*kh*kw in f32, forward and backward alike.
  CHECK(workspace_of(g, "conv1", "Conv") == 2 * 64 * 27 * 4);
  CHECK(workspace_of(g, "conv1", "ConvGrad") == 2 * 64 * 27 * 4);

  // The PyTorch memory model counts the graph's workspaces when told they are measured: the
  // backward of conv2 then holds 3 MB on top of what it holds otherwise.
  PytorchMemoryOptions measured;
  measured.conv_workspace_of_graph = true;
  auto with = predict_pytorch_memory(g, measured);
  auto without = predict_pytorch_memory(g, {});
  CHECK(with.backward_peak_bytes >= without.backward_peak_bytes + 3000000 - 512);
}

TEST_CASE("an entry matches only the same shapes, strides, pads, dtype and group") {
  struct Case { const char* from; const char* to; };
  const Case changes[] = {
      {"\"strides\": [2, 2]", "\"strides\": [1, 1]"},  {"\"pads\": [1, 1]", "\"pads\": [0, 0]"},
      {"\"float32\"", "\"bfloat16\""},                 {"\"group\": 1", "\"group\": 2"},
      {"\"input\": [2, 4, 8, 8]", "\"input\": [4, 4, 8, 8]"},
      {"\"dilations\": [1, 1]", "\"dilations\": [2, 2]"}};
  for (const Case& c : changes) {
    std::string entry = kConv2;
    entry.replace(entry.find(c.from), std::string(c.from).size(), c.to);
    std::string path = write_file("{\"convolutions\": [" + entry + "]}");
    training::TrainingOptions o;
    o.conv_workspaces = ConvWorkspaceTable::load(path);
    std::remove(path.c_str());
    auto ts = training::build_training_step(two_convs().m, o);
    CAPTURE(c.to);
    CHECK(ts.conv_workspaces_measured == 0);
    CHECK(workspace_of(ts.graph, "conv2", "Conv") == 2 * 16 * 36 * 4);  // the estimate
  }
}

TEST_CASE("under autocast an entry matches in the dtype the convolution computes in") {
  std::string entry = kConv2;
  entry.replace(entry.find("float32"), 7, "bfloat16");
  std::string path = write_file("{\"convolutions\": [" + entry + "]}");
  training::TrainingOptions o;
  o.conv_workspaces = ConvWorkspaceTable::load(path);
  o.autocast = training::Autocast::bf16;
  std::remove(path.c_str());
  auto ts = training::build_training_step(two_convs().m, o);
  CHECK(ts.conv_workspaces_measured == 1);
  CHECK(workspace_of(ts.graph, "conv2", "ConvGrad") == 3000000);
}

TEST_CASE("measured times go to the convolution's steps: backward to the weight alone where "
          "its input needs no gradient") {
  // conv1 reads x, the input, which needs no gradient: its ConvGrad computes the weight's
  // alone and takes backward_weight_us. conv2 reads a: backward_us. Times in microseconds.
  std::string conv1 = R"({"op": "Conv", "dtype": "float32", "input": [2, 3, 8, 8],
    "weight": [4, 3, 3, 3], "output": [2, 4, 8, 8], "strides": [1, 1], "pads": [1, 1],
    "dilations": [1, 1], "group": 1, "forward_bytes": 0, "backward_bytes": 0,
    "forward_us": 11, "backward_us": 33, "backward_weight_us": 22})";
  std::string conv2 = kConv2;
  conv2.replace(conv2.rfind('}'), 1, R"(, "forward_us": 100, "backward_us": 300})");
  std::string path = write_file("{\"convolutions\": [" + conv1 + ", " + conv2 + "]}");
  training::TrainingOptions o;
  o.conv_workspaces = ConvWorkspaceTable::load(path);
  std::remove(path.c_str());
  auto ts = training::build_training_step(two_convs().m, o);
  auto measured = [&](const std::string& node, const std::string& op) {
    for (const Step& s : ts.graph.steps)
      if (s.node == node && s.op == op) return s.measured_us;
    FAIL("no step " << node << "/" << op);
    return -2.0;
  };
  CHECK(measured("conv1", "Conv") == 11);
  CHECK(measured("conv1", "ConvGrad") == 22);
  CHECK(measured("conv2", "Conv") == 100);
  CHECK(measured("conv2", "ConvGrad") == 300);  // no backward_weight_us needed: a needs one
  for (const Step& s : ts.graph.steps)  // the others keep the roofline's
    if (s.node != "conv1" && s.node != "conv2") CHECK(s.measured_us == -1);

  SUBCASE("without a weight-only time, a first convolution takes the whole backward's") {
    std::string whole = conv1;
    whole.replace(whole.find(R"(, "backward_weight_us": 22)"), 26, "");
    std::string p2 = write_file("{\"convolutions\": [" + whole + "]}");
    training::TrainingOptions o2;
    o2.conv_workspaces = ConvWorkspaceTable::load(p2);
    std::remove(p2.c_str());
    auto ts2 = training::build_training_step(two_convs().m, o2);
    for (const Step& s : ts2.graph.steps)
      if (s.node == "conv1" && s.op == "ConvGrad") CHECK(s.measured_us == 33);
  }
}

TEST_CASE("a malformed workspace file names the entry and the fault") {
  struct Case { std::string text; const char* says; };
  std::string negative = kConv2;
  negative.replace(negative.find("1000000"), 7, "-1");
  std::string slow = kConv2;
  slow.replace(slow.rfind('}'), 1, R"(, "forward_us": -3})");
  std::string rank = kConv2;
  rank.replace(rank.find("[4, 4, 3, 3]"), 12, "[4, 4, 3]");
  const Case cases[] = {
      {"[]", "expected {\"convolutions\""},
      {"{\"convolutions\": [{\"op\": \"Gemm\"}]}", "convolutions[0].op must be"},
      {"{\"convolutions\": [" + negative + "]}", "convolutions[0].forward_bytes must be a whole number"},
      {"{\"convolutions\": [" + rank + "]}", "the same rank"},
      {"{\"convolutions\": [" + slow + "]}", "convolutions[0].forward_us must be a number of microseconds"},
      {"{\"convolutions\": [", "not valid JSON"}};
  for (const Case& c : cases) {
    std::string path = write_file(c.text);
    CAPTURE(c.text);
    try {
      ConvWorkspaceTable::load(path);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      CHECK(std::string(e.what()).find(c.says) != std::string::npos);
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
    std::remove(path.c_str());
  }
}

TEST_CASE("a measured workspace the budget cannot hold at its step is cut, never below the estimate") {
  std::string path = write_file(std::string("{\"convolutions\": [") + kConv2 + "]}");
  training::TrainingOptions o;
  o.conv_workspaces = ConvWorkspaceTable::load(path);
  std::remove(path.c_str());
  auto find = [](const TrainingGraph& g, const std::string& op) -> const Step& {
    for (const Step& s : g.steps)
      if (s.node == "conv2" && s.op == op) return s;
    FAIL("no step");
    return g.steps.front();
  };
  {
    auto ts = training::build_training_step(two_convs().m, o);
    REQUIRE(ts.measured_workspaces.size() == 2);  // conv2's forward and backward
    auto life = compute_lifetimes(ts.graph);
    const Step& grad = find(ts.graph, "ConvGrad");
    const int64_t need = unavoidable_bytes(ts.graph, life)[static_cast<size_t>(grad.id)];
    // 1000 B short at the backward step, none at the forward (whose workspace is smaller).
    CHECK(fit_measured_workspaces(ts, life, need - 1000, {}) == 1);
    CHECK(std::count_if(ts.measured_workspaces.begin(), ts.measured_workspaces.end(),
                        [](const auto& mw) { return mw.cut; }) == 1);
    CHECK(ts.graph.tensor(grad.workspace).bytes == 3000000 - 1000);
    for (const auto& mw : ts.measured_workspaces) {  // which one was cut, and from what
      CHECK(mw.entry == 0);
      CHECK(mw.cut == mw.backward);
      if (mw.cut) CHECK(mw.measured_bytes == 3000000);
    }
    CHECK(ts.graph.tensor(find(ts.graph, "Conv").workspace).bytes == 1000000);
  }
  {
    auto ts = training::build_training_step(two_convs().m, o);
    auto life = compute_lifetimes(ts.graph);
    CHECK(fit_measured_workspaces(ts, life, 1, {}) == 2);
    CHECK(ts.graph.tensor(find(ts.graph, "ConvGrad").workspace).bytes == 2 * 16 * 36 * 4);
    CHECK(ts.graph.tensor(find(ts.graph, "Conv").workspace).bytes == 2 * 16 * 36 * 4);
  }
}
