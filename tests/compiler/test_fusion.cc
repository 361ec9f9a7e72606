// Kernel fusion (model/fusion/fusion.h) on hand-built models: which nodes become one, and what
// the fused step saves for backward in PyTorch's memory model, in bytes worked out by hand.
//
// Every model starts with h = Gemm(x, w, b), x an input [2, 16] and h [2, 256] f32 (2048 bytes,
// four 512-byte blocks), so that h requires a gradient; the pattern reads h and its output is
// the logits. Saved bytes always include the loss's: log_prob (the logits' shape, 2048) and
// total_weight (512). Gemm saves x, an input, held anyway.
#include <doctest/doctest.h>

#include <cmath>

#include "analysis/pytorch_memory.h"
#include "model/fusion/fusion.h"
#include "model_builder.h"
#include "training/training_step.h"

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::ints_attr;

namespace {

constexpr int64_t kH = 2048, kLoss = 2048 + 512;

model::Attribute float_attr(double v) {
  model::Attribute a;
  a.kind = model::Attribute::Kind::f;
  a.f = v;
  return a;
}

ModelBuilder start() {
  ModelBuilder b;
  b.input("x", {2, 16}).param("w", {256, 16}).param("b", {256});
  b.node("Gemm", "fc", {"x", "w", "b"}, {{"h", {2, 256}}}, {{"transB", test::int_attr(1)}});
  return b;
}

ModelBuilder& scalar(ModelBuilder& b, const std::string& name, double v) {
  return b.constant(name, DType::f32, {}, {}, {v});
}

// The running nodes after fusion, as "op name(input, ...) -> output".
std::vector<std::string> nodes(const model::Model& m) {
  std::vector<std::string> out;
  for (const auto& n : m.nodes) {
    if (n.folded) continue;
    std::string s = n.op + " " + n.name + "(";
    for (size_t i = 0; i < n.inputs.size(); ++i)
      s += (i ? ", " : "") + (n.inputs[i] < 0 ? std::string() : m.values[size_t(n.inputs[i])].name);
    s += ") -> " + m.values[size_t(n.outputs[0])].name;
    out.push_back(s);
  }
  return out;
}

// What autograd holds at the end of forward, by PyTorch's memory model with no workspaces.
int64_t saved_bytes(const model::Model& m) {
  PytorchMemoryOptions o;
  o.library_workspace_bytes = 0;
  o.conv_workspace_fraction = 0;
  o.conv_workspace_cap = 0;
  training::TrainingOptions t;
  return predict_pytorch_memory(training::build_training_step(m, t).graph, o).saved_bytes;
}

using Ops = std::vector<std::string>;

}  // namespace

TEST_CASE("silu: Mul(h, Sigmoid(h)) becomes one Silu that saves h") {
  ModelBuilder b = start();
  b.node("Sigmoid", "sig", {"h"}, {{"s", {2, 256}}});
  b.node("Mul", "mul", {"h", "s"}, {{"y", {2, 256}}});
  b.output("y");
  CHECK(saved_bytes(b.m) == kH + kH + kLoss);  // unfused: h and s
  const model::FusionCounts counts = model::fuse_kernels(b.m);
  CHECK(counts == model::FusionCounts{{"Silu", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Silu mul(h) -> y"});
  CHECK(b.m.values[size_t(b.m.find("y"))].producer == 1);
  CHECK(saved_bytes(b.m) == kH + kLoss);
}

TEST_CASE("silu near misses: the sigmoid's output read elsewhere, or another operand (SE)") {
  SUBCASE("a second reader") {
    ModelBuilder b = start();
    b.node("Sigmoid", "sig", {"h"}, {{"s", {2, 256}}});
    b.node("Mul", "mul", {"h", "s"}, {{"m", {2, 256}}});
    b.node("Add", "add", {"m", "s"}, {{"y", {2, 256}}});
    b.output("y");
    CHECK(model::fuse_kernels(b.m).empty());
    CHECK(nodes(b.m).size() == 4);
  }
  SUBCASE("squeeze-excitation: sigmoid of another value times h") {
    ModelBuilder b = start();
    b.param("w2", {256, 256}).param("b2", {256});
    b.node("Gemm", "fc2", {"h", "w2", "b2"}, {{"z", {2, 256}}}, {{"transB", test::int_attr(1)}});
    b.node("Sigmoid", "sig", {"z"}, {{"s", {2, 256}}});
    b.node("Mul", "mul", {"s", "h"}, {{"y", {2, 256}}});
    b.output("y");
    CHECK(model::fuse_kernels(b.m).empty());
    // Mul saves both operands, Sigmoid its output (s, once): h, s; fc2 saves h.
    CHECK(saved_bytes(b.m) == kH + kH + kLoss);
  }
}

TEST_CASE("gelu: the exporter's erf form becomes one Gelu that saves h") {
  auto build = [](double half) {
    ModelBuilder b = start();
    scalar(b, "sqrt2", 1.4142135381698608);
    scalar(b, "one", 1.0);
    scalar(b, "half", half);
    b.node("Div", "div", {"h", "sqrt2"}, {{"a", {2, 256}}});
    b.node("Erf", "erf", {"a"}, {{"e", {2, 256}}});
    b.node("Add", "add", {"e", "one"}, {{"p", {2, 256}}});
    b.node("Mul", "mul", {"h", "p"}, {{"q", {2, 256}}});
    b.node("Mul", "mul_1", {"q", "half"}, {{"y", {2, 256}}});
    b.output("y");
    return b;
  };
  ModelBuilder b = build(0.5);
  // Unfused: Div and Mul_1 save their constants (buffers; no gradient of theirs needs h or q),
  // Erf a, Mul h and p.
  CHECK(saved_bytes(b.m) == 3 * kH + kLoss);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"Gelu", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Gelu mul_1(h) -> y"});
  CHECK(saved_bytes(b.m) == kH + kLoss);

  ModelBuilder near = build(0.25);  // another constant: not gelu
  CHECK(model::fuse_kernels(near.m).empty());
  CHECK(nodes(near.m).size() == 6);
}

TEST_CASE("hardswish: Mul(h, HardSigmoid(h)) with alpha 1/6 and beta 1/2") {
  auto build = [](double alpha) {
    ModelBuilder b = start();
    b.node("HardSigmoid", "hsig", {"h"}, {{"s", {2, 256}}},
           {{"alpha", float_attr(alpha)}, {"beta", float_attr(0.5)}});
    b.node("Mul", "mul", {"s", "h"}, {{"y", {2, 256}}});
    b.output("y");
    return b;
  };
  ModelBuilder b = build(1.0 / 6);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"HardSwish", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "HardSwish mul(h) -> y"});
  CHECK(saved_bytes(b.m) == kH + kLoss);

  ModelBuilder near = build(0.2);  // ONNX's default hard sigmoid: not hardswish
  CHECK(model::fuse_kernels(near.m).empty());
  CHECK(saved_bytes(near.m) == kH + kH + kLoss);  // HardSigmoid saves h, Mul h and s
}

TEST_CASE("mish: Mul(h, Tanh(Softplus(h)))") {
  ModelBuilder b = start();
  b.node("Softplus", "sp", {"h"}, {{"p", {2, 256}}});
  b.node("Tanh", "tanh", {"p"}, {{"t", {2, 256}}});
  b.node("Mul", "mul", {"h", "t"}, {{"y", {2, 256}}});
  b.output("y");
  CHECK(saved_bytes(b.m) == 2 * kH + kLoss);  // Softplus h, Tanh t, Mul h and t
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"Mish", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Mish mul(h) -> y"});
  CHECK(saved_bytes(b.m) == kH + kLoss);

  ModelBuilder near = start();  // tanh of the softplus times another value
  near.param("g", {2, 256});
  near.node("Softplus", "sp", {"h"}, {{"p", {2, 256}}});
  near.node("Tanh", "tanh", {"p"}, {{"t", {2, 256}}});
  near.node("Mul", "mul", {"g", "t"}, {{"y", {2, 256}}});
  near.output("y");
  CHECK(model::fuse_kernels(near.m).empty());
}

TEST_CASE("layer norm: the decomposition over the last axis becomes LayerNormalization") {
  auto build = [](int64_t axis) {
    ModelBuilder b = start();
    scalar(b, "two", 2.0);
    scalar(b, "eps", 1e-5);
    b.param("gamma", {256}).param("beta", {256});
    const Shape stats = axis == 1 ? Shape{2, 1} : Shape{1, 256};
    b.node("ReduceMean", "mean", {"h"}, {{"mu", stats}}, {{"axes", ints_attr({axis})}});
    b.node("Sub", "sub", {"h", "mu"}, {{"d", {2, 256}}});
    b.node("Pow", "pow", {"d", "two"}, {{"sq", {2, 256}}});
    b.node("ReduceMean", "var", {"sq"}, {{"v", stats}}, {{"axes", ints_attr({axis})}});
    b.node("Add", "add_eps", {"v", "eps"}, {{"ve", stats}});
    b.node("Sqrt", "sqrt", {"ve"}, {{"sd", stats}});
    b.node("Div", "div", {"d", "sd"}, {{"n", {2, 256}}});
    b.node("Mul", "mul", {"n", "gamma"}, {{"sc", {2, 256}}});
    b.node("Add", "add", {"sc", "beta"}, {{"y", {2, 256}}});
    b.output("y");
    return b;
  };
  ModelBuilder b = build(-1);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"LayerNormalization", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "LayerNormalization add(h, gamma, beta) -> y"});
  const model::Node& ln = b.m.nodes.back();
  CHECK(ln.attr_i("axis", 0) == 1);
  CHECK(ln.attr_f("epsilon", 0) == doctest::Approx(1e-5));
  // native_layer_norm saves h, the mean and rstd ([2, 1] f32: 8 bytes, a 512-byte block each).
  CHECK(saved_bytes(b.m) == kH + 512 + 512 + kLoss);

  ModelBuilder near = build(0);  // statistics over the batch axis: not a layer norm
  CHECK(model::fuse_kernels(near.m).empty());
  CHECK(nodes(near.m).size() == 10);
}

TEST_CASE("linear: Add(MatMul(x, Transpose(W)), b) on a rank-3 input becomes Linear") {
  auto build = [](bool second_reader) {
    ModelBuilder b;
    b.input("x", {2, 4, 16}).param("W", {8, 16}).param("bias", {8});
    b.node("Transpose", "t", {"W"}, {{"wt", {16, 8}}}, {{"perm", ints_attr({1, 0})}});
    b.node("MatMul", "mm", {"x", "wt"}, {{"xw", {2, 4, 8}}});
    b.node("Add", "add", {"bias", "xw"}, {{"y", {2, 4, 8}}});
    b.output("y");
    if (second_reader) b.output("xw");
    return b;
  };
  ModelBuilder b = build(false);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"Linear", 1}});
  CHECK(nodes(b.m) == Ops{"Linear add(x, W, bias) -> y"});
  // Under autocast the linear layer's output is bf16: the bias is added in the same kernel.
  training::TrainingOptions o;
  o.autocast = training::Autocast::bf16;
  const TrainingGraph g = training::build_training_step(b.m, o).graph;
  bool found = false;
  for (const Tensor& t : g.tensors)
    if (t.name == "y") {
      found = true;
      CHECK(t.dtype == DType::bf16);
    }
  CHECK(found);

  ModelBuilder near = build(true);  // the product is a graph output too
  CHECK(model::fuse_kernels(near.m).empty());
  CHECK(nodes(near.m).size() == 3);
}

// A tiny attention block on h: four heads of eight positions of eight features, q = k = v =
// Reshape(h) [2, 4, 8, 8] (2048 bytes), y4 = attention [2, 4, 8, 8], read back as the logits;
// with `dropout`, a training Dropout(0.1) on the probabilities, its mask "mask".
ModelBuilder attention_block(bool masked, bool dropout = false) {
  ModelBuilder b = start();
  b.constant("heads", DType::i64, {4}, {2, 4, 8, 8}).constant("flat", DType::i64, {2}, {2, 256});
  scalar(b, "root_d", std::sqrt(8.0));
  b.param("bias", {8, 8});
  b.node("Reshape", "split_heads", {"h", "heads"}, {{"hq", {2, 4, 8, 8}}});
  b.node("Transpose", "kt", {"hq"}, {{"hkt", {2, 4, 8, 8}}}, {{"perm", ints_attr({0, 1, 3, 2})}});
  b.node("Div", "scale", {"hq", "root_d"}, {{"qs", {2, 4, 8, 8}}});
  b.node("MatMul", "qk", {"qs", "hkt"}, {{"s", {2, 4, 8, 8}}});
  std::string scores = "s";
  if (masked) {  // a relative position bias (swin): not what scaled_dot_product_attention runs
    b.node("Add", "add_bias", {"s", "bias"}, {{"sb", {2, 4, 8, 8}}});
    scores = "sb";
  }
  b.node("Softmax", "softmax", {scores}, {{"p", {2, 4, 8, 8}}}, {{"axis", test::int_attr(-1)}});
  std::string probs = "p";
  if (dropout) {
    scalar(b, "ratio", 0.1);
    b.constant("train", DType::boolean, {}, {1});
    b.node("Dropout", "drop", {"p", "ratio", "train"}, {{"pd", {2, 4, 8, 8}}, {"mask", {2, 4, 8, 8}}});
    probs = "pd";
  }
  b.node("MatMul", "pv", {probs, "hq"}, {{"y4", {2, 4, 8, 8}}});
  b.node("Reshape", "merge_heads", {"y4", "flat"}, {{"y", {2, 256}}});
  b.output("y");
  return b;
}

TEST_CASE("attention: MatMul(Softmax(MatMul(q / sqrt d, Transpose(k))), v) becomes one kernel") {
  ModelBuilder b = attention_block(false);
  // Unfused, autograd keeps h (the second MatMul's v), q / sqrt d and the key's transposed
  // copy (the first MatMul's) and the probabilities (Softmax and the second MatMul).
  CHECK(saved_bytes(b.m) == 4 * kH + kLoss);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"ScaledDotProductAttention", 1}});
  // The key's Transpose swaps back to the identity and goes: k is hq itself.
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Reshape split_heads(h, heads) -> hq",
                          "ScaledDotProductAttention pv(hq, hq, hq) -> y4",
                          "Reshape merge_heads(y4, flat) -> y"});
  CHECK(b.m.nodes[2].attr_f("scale", 0) == doctest::Approx(1 / std::sqrt(8.0)));
  // The kernel saves q = k = v (h's storage), its output and the f32 logsumexp [2, 4, 8]
  // (256 bytes, one block).
  CHECK(saved_bytes(b.m) == kH + kH + 512 + kLoss);

  // The training step: one forward step with [y4, logsumexp], one backward step writing the
  // three input gradients (all h's, summed), five products' worth of FLOPs.
  const TrainingGraph g = training::build_training_step(b.m, training::TrainingOptions{}).graph;
  const Step* fwd = nullptr;
  const Step* bwd = nullptr;
  for (const Step& s : g.steps) {
    if (s.op == "ScaledDotProductAttention") fwd = &s;
    if (s.op == "ScaledDotProductAttentionGrad") bwd = &s;
  }
  REQUIRE(fwd);
  REQUIRE(bwd);
  REQUIRE(fwd->outputs.size() == 2);
  CHECK(g.tensor(fwd->outputs[1]).shape == Shape{2, 4, 8});
  CHECK(g.tensor(fwd->outputs[1]).dtype == DType::f32);
  // 2 x 4 x 8 x 8 scores, each 2 x 8 (Q K^T) + 2 x 8 (P V) + 5 (softmax) FLOPs.
  CHECK(fwd->flops == doctest::Approx(512.0 * 37));
  CHECK(bwd->flops == doctest::Approx(2.5 * 512 * 37));
  CHECK(bwd->outputs.size() == 3);
}

TEST_CASE("attention with dropout on the probabilities: the kernel drops, no mask is kept") {
  ModelBuilder b = attention_block(false, true);
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"ScaledDotProductAttention", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Reshape split_heads(h, heads) -> hq",
                          "ScaledDotProductAttention pv(hq, hq, hq) -> y4",
                          "Reshape merge_heads(y4, flat) -> y"});
  CHECK(b.m.nodes[2].attr_f("dropout", 0) == doctest::Approx(0.1));
  CHECK(saved_bytes(b.m) == kH + kH + 512 + kLoss);  // as without dropout: no [.., L, L] mask

  ModelBuilder near = attention_block(false, true);  // the mask is read: it must exist
  near.output("mask");
  CHECK(model::fuse_kernels(near.m).empty());
}

TEST_CASE("attention on the 1.13 exporter's [N * heads, L, d] layout rewrites the key's Transpose") {
  // h as [L 8, N * heads 4, d 16]; q = v = Transpose(r, [1, 0, 2]), K^T = Transpose(r, [1, 2, 0]).
  ModelBuilder b = start();
  b.constant("lnd", DType::i64, {3}, {8, 4, 16}).constant("flat", DType::i64, {2}, {2, 256});
  scalar(b, "quarter", 0.25);
  b.node("Reshape", "r", {"h", "lnd"}, {{"hr", {8, 4, 16}}});
  b.node("Transpose", "tq", {"hr"}, {{"q", {4, 8, 16}}}, {{"perm", ints_attr({1, 0, 2})}});
  b.node("Transpose", "tk", {"hr"}, {{"kt", {4, 16, 8}}}, {{"perm", ints_attr({1, 2, 0})}});
  b.node("Mul", "scale", {"q", "quarter"}, {{"qs", {4, 8, 16}}});
  b.node("MatMul", "qk", {"qs", "kt"}, {{"s", {4, 8, 8}}});
  b.node("Softmax", "softmax", {"s"}, {{"p", {4, 8, 8}}}, {{"axis", test::int_attr(2)}});
  b.node("MatMul", "pv", {"p", "q"}, {{"o", {4, 8, 16}}});
  b.node("Reshape", "back", {"o", "flat"}, {{"y", {2, 256}}});
  b.output("y");
  CHECK(model::fuse_kernels(b.m) == model::FusionCounts{{"ScaledDotProductAttention", 1}});
  CHECK(nodes(b.m) == Ops{"Gemm fc(x, w, b) -> h", "Reshape r(h, lnd) -> hr", "Transpose tq(hr) -> q",
                          "Transpose tk(hr) -> kt", "ScaledDotProductAttention pv(q, kt, q) -> o",
                          "Reshape back(o, flat) -> y"});
  CHECK(b.m.nodes[3].attr_ints("perm") == std::vector<int64_t>{1, 0, 2});
  CHECK(b.m.values[size_t(b.m.find("kt"))].shape == Shape{4, 8, 16});
  CHECK(b.m.nodes[4].attr_f("scale", 0) == doctest::Approx(0.25));
  // Saved: q and k (the Transposes' copies), the output, the logsumexp [4, 8] (128 bytes).
  CHECK(saved_bytes(b.m) == kH + kH + kH + 512 + kLoss);
}

TEST_CASE("attention near misses: a bias on the scores, the probabilities read elsewhere") {
  SUBCASE("a bias added to the scores (swin's relative position bias)") {
    ModelBuilder b = attention_block(true);
    CHECK(model::fuse_kernels(b.m).empty());
    CHECK(nodes(b.m).size() == 9);
  }
  SUBCASE("the probabilities are also a graph output") {
    ModelBuilder b = attention_block(false);
    b.output("p");
    CHECK(model::fuse_kernels(b.m).empty());
    CHECK(nodes(b.m).size() == 8);
  }
}
