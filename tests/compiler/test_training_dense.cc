// Gradient rules of the ops of dense-prediction and modern CNNs, on hand-made models: which
// forward tensors each backward step reads and which gradients it writes.
#include <doctest/doctest.h>

#include "model_builder.h"
#include "training/training_step.h"
#include "util/error.h"

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::int_attr;
using autovm::test::ints_attr;

namespace {

using Names = std::vector<std::string>;

training::TrainingStep build(const ModelBuilder& b) { return training::build_training_step(b.m, {}); }

const Step& find_step(const TrainingGraph& g, const std::string& op) {
  for (const auto& s : g.steps)
    if (s.op == op) return s;
  FAIL("no step " << op);
  return g.steps.front();
}

Names names(const TrainingGraph& g, const std::vector<TensorId>& ids) {
  Names out;
  for (TensorId t : ids) out.push_back(g.tensor(t).name);
  return out;
}

// x [2, 8] input; h = Mul(x, p) so that h requires a gradient.
ModelBuilder with_h() {
  ModelBuilder b;
  b.input("x", {2, 8}).param("p", {2, 8});
  b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 8}}});
  return b;
}

// x [2, 4, 3, 3]; h = Mul(x, p); the op under test then writes y, which flatten() makes the logits.
ModelBuilder with_image() {
  ModelBuilder b;
  b.input("x", {2, 4, 3, 3}).param("p", {2, 4, 3, 3});
  b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 4, 3, 3}}});
  return b;
}

ModelBuilder& flatten(ModelBuilder& b, const Shape& y) {
  return b.node("Flatten", "flat", {"y"}, {{"logits", {y[0], element_count(y) / y[0]}}}).output("logits");
}

}  // namespace

TEST_CASE("activations keep their input, or tanh its output") {
  struct Case { const char* op; Names expected_inputs; };
  const Case cases[] = {
      {"LeakyRelu", {"grad/y", "h"}}, {"Elu", {"grad/y", "h"}},  {"Selu", {"grad/y", "h"}},
      {"Softplus", {"grad/y", "h"}},  {"Mish", {"grad/y", "h"}}, {"Gelu", {"grad/y", "h"}},
      {"Tanh", {"grad/y", "y"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    ModelBuilder b = with_h();
    b.node(c.op, "op", {"h"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const Step& grad = find_step(ts.graph, std::string(c.op) + "Grad");
    CHECK(names(ts.graph, grad.inputs) == c.expected_inputs);
    CHECK(names(ts.graph, grad.outputs) == Names{"grad/h"});
  }
}

TEST_CASE("ConvTranspose: dX needs W, dW needs X, dB nothing; its workspace counts as Conv's") {
  // h [2, 4, 3, 3] -> ConvTranspose(w [4, 2, 3, 3], stride 2) -> y [2, 2, 7, 7].
  const Shape y{2, 2, 7, 7};
  ModelBuilder b = with_image();
  b.param("w", {4, 2, 3, 3}).param("bias", {2});
  b.node("ConvTranspose", "up", {"h", "w", "bias"}, {{"y", y}}, {{"strides", ints_attr({2, 2})}});
  flatten(b, y);
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  const Step& fwd = find_step(g, "ConvTranspose");
  // FLOPs: each of the 72 input elements meets 2 x 3 x 3 weights (2 FLOPs each), plus a bias
  // add per output element: 72 * 36 + 196.
  CHECK(fwd.flops == 72 * 36 + 196);
  // Workspace: col2im over the input grid, N * Hi * Wi * Cout * kh * kw = 2 * 9 * 18 floats.
  REQUIRE(fwd.workspace != kNoTensor);
  CHECK(g.tensor(fwd.workspace).bytes == 2 * 9 * 18 * 4);
  const Step& grad = find_step(g, "ConvTransposeGrad");
  CHECK(names(g, grad.inputs) == Names{"grad/y", "w", "h"});
  CHECK(names(g, grad.outputs) == Names{"grad/h", "grad/w", "grad/bias"});
  CHECK(grad.flops == 2 * fwd.flops);
}

TEST_CASE("3-D convolution, max pooling and batch norm keep what their 2-D forms keep") {
  ModelBuilder b;
  b.input("x", {2, 1, 4, 4, 4}).param("w", {3, 1, 3, 3, 3});
  for (const char* s : {"s", "bb"}) b.param(s, {3});
  b.constant("rm", DType::f32, {3}, {}, {0, 0, 0}).constant("rv", DType::f32, {3}, {}, {1, 1, 1});
  b.node("Conv", "conv", {"x", "w"}, {{"c", {2, 3, 4, 4, 4}}}, {{"pads", ints_attr({1, 1, 1, 1, 1, 1})}});
  b.node("BatchNormalization", "bn", {"c", "s", "bb", "rm", "rv"}, {{"n", {2, 3, 4, 4, 4}}},
         {{"training_mode", int_attr(1)}});
  b.node("MaxPool", "pool", {"n"}, {{"y", {2, 3, 2, 2, 2}}},
         {{"kernel_shape", ints_attr({2, 2, 2})}, {"strides", ints_attr({2, 2, 2})}});
  flatten(b, {2, 3, 2, 2, 2});
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  // Conv FLOPs: 2 * 3 * 64 outputs x 27 weights x 2.
  CHECK(find_step(g, "Conv").flops == 384 * 54);
  CHECK(names(g, find_step(g, "ConvGrad").outputs) == Names{"grad/w"});  // x needs no gradient
  CHECK(names(g, find_step(g, "ConvGrad").inputs) == Names{"grad/c", "x"});
  CHECK(names(g, find_step(g, "BatchNormalizationGrad").inputs) ==
        Names{"grad/n", "c", "s", "bn/saved_mean", "bn/saved_inv_std"});
  CHECK(names(g, find_step(g, "MaxPoolGrad").inputs) == Names{"grad/y", "n", "y"});
  CHECK(find_step(g, "MaxPool").flops == 48 * 8);
}

TEST_CASE("instance and group norm save per-sample statistics") {
  const Shape y{2, 4, 3, 3};
  SUBCASE("InstanceNormalization: [N, C] statistics") {
    ModelBuilder b = with_image();
    b.param("s", {4}).param("bb", {4});
    b.node("InstanceNormalization", "in", {"h", "s", "bb"}, {{"y", y}});
    flatten(b, y);
    auto ts = build(b);
    const TrainingGraph& g = ts.graph;
    const Step& fwd = find_step(g, "InstanceNormalization");
    CHECK(names(g, fwd.outputs) == Names{"y", "in/saved_mean", "in/saved_inv_std"});
    CHECK(g.tensor(fwd.outputs[1]).shape == Shape{2, 4});
    CHECK(g.tensor(fwd.outputs[2]).dtype == DType::f32);
    CHECK(fwd.flops == 8 * 72);
    CHECK(names(g, find_step(g, "InstanceNormalizationGrad").inputs) ==
          Names{"grad/y", "h", "s", "in/saved_mean", "in/saved_inv_std"});
    CHECK(names(g, find_step(g, "InstanceNormalizationGrad").outputs) == Names{"grad/h", "grad/s", "grad/bb"});
  }
  SUBCASE("GroupNormalization: [N, groups] statistics") {
    ModelBuilder b = with_image();
    b.param("s", {2}).param("bb", {2});
    b.node("GroupNormalization", "gn", {"h", "s", "bb"}, {{"y", y}}, {{"num_groups", int_attr(2)}});
    flatten(b, y);
    auto ts = build(b);
    const TrainingGraph& g = ts.graph;
    const Step& fwd = find_step(g, "GroupNormalization");
    CHECK(g.tensor(fwd.outputs[1]).shape == Shape{2, 2});
    CHECK(names(g, find_step(g, "GroupNormalizationGrad").inputs) ==
          Names{"grad/y", "h", "s", "gn/saved_mean", "gn/saved_inv_std"});
  }
}

TEST_CASE("Sum needs nothing; Max and Min need every input") {
  for (const char* op : {"Sum", "Max", "Min"}) {
    CAPTURE(op);
    ModelBuilder b = with_h();
    b.param("q", {2, 8}).param("r", {8});
    b.node(op, "op", {"h", "q", "r"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const Step& grad = find_step(ts.graph, std::string(op) + "Grad");
    CHECK(names(ts.graph, grad.outputs) == Names{"grad/h", "grad/q", "grad/r"});
    CHECK(names(ts.graph, grad.inputs) ==
          (std::string(op) == "Sum" ? Names{"grad/y"} : Names{"grad/y", "h", "q", "r"}));
    CHECK(find_step(ts.graph, op).flops == 16 * 2);
  }
}

TEST_CASE("reductions: ReduceSum needs nothing, ReduceMax and GlobalMaxPool input and output") {
  ModelBuilder b = with_h();
  b.node("ReduceSum", "sum", {"h"}, {{"s", {2, 1}}}, {{"axes", ints_attr({1})}});
  b.node("ReduceMax", "max", {"h"}, {{"m", {2, 1}}}, {{"axes", ints_attr({1})}});
  b.node("Concat", "cat", {"s", "m"}, {{"y", {2, 2}}}, {{"axis", int_attr(1)}}).output("y");
  auto ts = build(b);
  CHECK(names(ts.graph, find_step(ts.graph, "ReduceSumGrad").inputs) == Names{"grad/s"});
  CHECK(names(ts.graph, find_step(ts.graph, "ReduceMaxGrad").inputs) == Names{"grad/m", "h", "m"});

  const Shape y{2, 4, 1, 1};
  ModelBuilder p = with_image();
  p.node("GlobalMaxPool", "gmp", {"h"}, {{"y", y}});
  flatten(p, y);
  auto tp = build(p);
  CHECK(names(tp.graph, find_step(tp.graph, "GlobalMaxPoolGrad").inputs) == Names{"grad/y", "h", "y"});
}

TEST_CASE("the dynamo exporter's dropout: the mask is drawn, compared, cast, multiplied") {
  // r = RandomUniformLike(h); keep = Less(r, keep_prob); mask = Cast(keep); y = Mul(h, mask).
  ModelBuilder b = with_h();
  b.constant("keep_prob", DType::f32, {}, {}, {0.9});
  b.node("RandomUniformLike", "rand", {"h"}, {{"r", {2, 8}}});
  b.node("Less", "less", {"r", "keep_prob"}, {{"keep", {2, 8}}}, {}, DType::boolean);
  b.node("Cast", "cast", {"keep"}, {{"mask", {2, 8}}}, {{"to", int_attr(1)}});
  b.node("Mul", "drop", {"h", "mask"}, {{"y", {2, 8}}}).output("y");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  CHECK(find_step(g, "RandomUniformLike").inputs.empty());  // reads only h's shape
  CHECK(names(g, find_step(g, "Less").inputs) == Names{"r", "keep_prob"});
  // Only h needs a gradient: Mul's backward keeps the mask, not h; nothing flows into Less.
  int mul_grads = 0;
  for (const Step& s : g.steps) {
    if (s.op != "MulGrad" || s.node != "drop") continue;
    ++mul_grads;
    CHECK(names(g, s.inputs) == Names{"grad/y", "mask"});
    CHECK(names(g, s.outputs) == Names{"grad/h"});
  }
  CHECK(mul_grads == 1);
  for (const Step& s : g.steps) CHECK(s.op != "LessGrad");
  for (const Step& s : g.steps) CHECK(s.op != "CastGrad");

  SUBCASE("ONNX's Dropout function body: keep = r >= ratio; y = Where(keep, h, 0) / (1 - ratio)") {
    ModelBuilder f = with_h();
    f.constant("ratio", DType::f32, {}, {}, {0.1}).constant("zero", DType::f32, {}, {}, {0.0});
    f.constant("scale", DType::f32, {}, {}, {0.9});
    f.node("RandomUniformLike", "rand", {"h"}, {{"r", {2, 8}}});
    f.node("GreaterOrEqual", "ge", {"r", "ratio"}, {{"keep", {2, 8}}}, {}, DType::boolean);
    f.node("Where", "where", {"keep", "h", "zero"}, {{"w", {2, 8}}});
    f.node("Div", "div", {"w", "scale"}, {{"y", {2, 8}}}).output("y");
    auto tf = build(f);
    // Where's backward keeps the boolean mask only; the scale is a buffer.
    CHECK(names(tf.graph, find_step(tf.graph, "WhereGrad").inputs) == Names{"grad/w", "keep"});
    CHECK(names(tf.graph, find_step(tf.graph, "WhereGrad").outputs) == Names{"grad/h"});
    CHECK(names(tf.graph, find_step(tf.graph, "DivGrad").inputs) == Names{"grad/y", "scale"});
  }
}

namespace {

training::TrainingStep build_with(const ModelBuilder& b, training::Loss loss) {
  training::TrainingOptions o;
  o.loss = loss;
  return training::build_training_step(b.m, o);
}

// x [2, 3, 4, 4] -> Conv(w [5, 3, 1, 1]) -> y [2, 5, 4, 4]: per-pixel scores of 5 classes.
ModelBuilder segmenter() {
  ModelBuilder b;
  b.input("x", {2, 3, 4, 4}).param("w", {5, 3, 1, 1});
  b.node("Conv", "conv", {"x", "w"}, {{"y", {2, 5, 4, 4}}}).output("y");
  return b;
}

}  // namespace

TEST_CASE("losses: per-pixel cross-entropy, mse, external") {
  SUBCASE("cross-entropy per pixel: labels [N, H, W]") {
    auto ts = build_with(segmenter(), training::Loss::cross_entropy);
    const TrainingGraph& g = ts.graph;
    CHECK(g.tensor(ts.label).shape == Shape{2, 4, 4});
    CHECK(g.tensor(ts.label).dtype == DType::i64);
    const Step& loss = find_step(g, "SoftmaxCrossEntropyLoss");
    CHECK(loss.phase == Phase::loss);
    CHECK(names(g, loss.inputs) == Names{"y", "label"});
    CHECK(names(g, loss.outputs) == Names{"loss", "loss/log_prob"});
    CHECK(g.tensor(loss.outputs[1]).shape == Shape{2, 5, 4, 4});
    CHECK(loss.flops == 5.0 * 160);
    const Step& grad = find_step(g, "SoftmaxCrossEntropyLossGrad");
    CHECK(names(g, grad.inputs) == Names{"loss/log_prob", "label"});
    CHECK(names(g, grad.outputs) == Names{"grad/y"});
    CHECK(names(g, find_step(g, "ConvGrad").inputs) == Names{"grad/y", "x"});
  }
  SUBCASE("mse: a float target of the output's shape; the gradient reads output and target") {
    auto ts = build_with(segmenter(), training::Loss::mse);
    const TrainingGraph& g = ts.graph;
    CHECK(g.tensor(ts.label).shape == Shape{2, 5, 4, 4});
    CHECK(g.tensor(ts.label).kind == TensorKind::label);
    CHECK(g.tensor(ts.label).dtype == DType::f32);
    CHECK(names(g, find_step(g, "MeanSquaredErrorLoss").inputs) == Names{"y", "label"});
    CHECK(names(g, find_step(g, "MeanSquaredErrorLoss").outputs) == Names{"loss"});
    CHECK(names(g, find_step(g, "MeanSquaredErrorLossGrad").inputs) == Names{"y", "label"});
    CHECK(names(g, find_step(g, "MeanSquaredErrorLossGrad").outputs) == Names{"grad/y"});
  }
  SUBCASE("external: no labels; the loss's memory is a workspace of the outputs' size") {
    auto ts = build_with(segmenter(), training::Loss::external);
    const TrainingGraph& g = ts.graph;
    CHECK(ts.label == kNoTensor);
    const Step& loss = find_step(g, "ExternalLoss");
    CHECK(names(g, loss.inputs) == Names{"y"});
    CHECK(names(g, loss.outputs) == Names{"loss"});
    REQUIRE(loss.workspace != kNoTensor);
    CHECK(g.tensor(loss.workspace).bytes == 160 * 4);
    CHECK(names(g, find_step(g, "ExternalLossGrad").inputs) == Names{"y"});
    CHECK(names(g, find_step(g, "ExternalLossGrad").outputs) == Names{"grad/y"});
    for (const Tensor& t : g.tensors) CHECK(t.kind != TensorKind::label);
  }
}

TEST_CASE("several outputs: every floating-point output gets a loss term (out and aux)") {
  // y = Conv(x) is "out"; aux = Conv(x, w2) [2, 5, 4, 4]; an int64 output carries no loss.
  ModelBuilder b = segmenter();
  b.param("w2", {5, 3, 1, 1});
  b.node("Conv", "aux_conv", {"x", "w2"}, {{"aux", {2, 5, 4, 4}}}).output("aux");
  b.node("Shape", "shape", {"y"}, {{"dims", {4}}}, {}, DType::i64).output("dims");
  SUBCASE("cross-entropy: the same labels for both") {
    auto ts = build_with(b, training::Loss::cross_entropy);
    const TrainingGraph& g = ts.graph;
    CHECK(names(g, ts.outputs) == Names{"y", "aux"});
    int losses = 0;
    for (const Step& s : g.steps) {
      if (s.op != "SoftmaxCrossEntropyLoss") continue;
      ++losses;
      CHECK(g.tensor(s.inputs[1]).name == "label");
    }
    CHECK(losses == 2);
    const Step* aux_grad = nullptr;
    for (const Step& s : g.steps)
      if (s.op == "SoftmaxCrossEntropyLossGrad" && s.node == "aux") aux_grad = &s;
    REQUIRE(aux_grad);
    CHECK(names(g, aux_grad->inputs) == Names{"aux/loss/log_prob", "label"});
    CHECK(names(g, aux_grad->outputs) == Names{"grad/aux"});
    Names conv_grads;  // backward runs aux_conv first
    for (const Step& s : g.steps)
      if (s.op == "ConvGrad") conv_grads.push_back(g.tensor(s.outputs[0]).name);
    CHECK(conv_grads == Names{"grad/w2", "grad/w"});
  }
  SUBCASE("mse: a target per output") {
    auto ts = build_with(b, training::Loss::mse);
    Names targets;
    for (const Tensor& t : ts.graph.tensors)
      if (t.kind == TensorKind::label) targets.push_back(t.name);
    CHECK(targets == Names{"label", "label.1"});
  }
  SUBCASE("external: one step reads both; the reserve is both outputs' bytes") {
    auto ts = build_with(b, training::Loss::external);
    const Step& loss = find_step(ts.graph, "ExternalLoss");
    CHECK(names(ts.graph, loss.inputs) == Names{"y", "aux"});
    CHECK(ts.graph.tensor(loss.workspace).bytes == 2 * 160 * 4);
  }
}

TEST_CASE("cross-entropy needs the outputs' labels to agree") {
  ModelBuilder b = segmenter();
  b.param("w2", {5, 3, 1, 1});
  b.node("Conv", "small", {"x", "w2"}, {{"aux", {2, 5, 2, 2}}}, {{"strides", ints_attr({2, 2})}}).output("aux");
  CHECK_THROWS_WITH_AS(build_with(b, training::Loss::cross_entropy),
                       "output 'aux' has shape [2, 5, 2, 2] but the first output's labels have shape [2, 4, 4]; "
                       "cross-entropy scores every output against the same labels",
                       Error);
  CHECK(training::parse_loss("mse") == training::Loss::mse);
  CHECK(training::parse_loss("dice") == std::nullopt);
  CHECK(training::name(training::Loss::external) == "external");
}
