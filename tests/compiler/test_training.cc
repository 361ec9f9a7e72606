// The training step built from hand-made models: one test per gradient rule (which forward
// tensors each backward step keeps), gradient accumulation, loss and optimizer steps.
#include <doctest/doctest.h>

#include <algorithm>

#include "model_builder.h"
#include "training/gradient_rules.h"
#include "training/training_step.h"
#include "util/error.h"

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::int_attr;
using autovm::test::ints_attr;

namespace {

training::TrainingStep build(const ModelBuilder& b,
                             training::Optimizer opt = training::Optimizer::sgd) {
  training::TrainingOptions o;
  o.optimizer = opt;
  return training::build_training_step(b.m, o);
}

TensorId id(const TrainingGraph& g, const std::string& name) {
  for (const auto& t : g.tensors)
    if (t.name == name) return t.id;
  FAIL("no tensor named " << name);
  return kNoTensor;
}

const Step& find_step(const TrainingGraph& g, const std::string& op) {
  for (const auto& s : g.steps)
    if (s.op == op) return s;
  FAIL("no step " << op);
  return g.steps.front();
}

std::vector<std::string> names(const TrainingGraph& g, const std::vector<TensorId>& ids) {
  std::vector<std::string> out;
  for (TensorId t : ids) out.push_back(g.tensor(t).name);
  return out;
}

using Names = std::vector<std::string>;

// x [2,8] input; h = Mul(x, p) so that h requires a gradient; then the op under test.
ModelBuilder with_h() {
  ModelBuilder b;
  b.input("x", {2, 8}).param("p", {2, 8});
  b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 8}}});
  return b;
}

}  // namespace

TEST_CASE("unary rules keep exactly the tensors the table says") {
  struct Case { const char* op; Names expected_inputs; };
  // dy is "grad/y"; the op reads h and writes y.
  const Case cases[] = {
      {"Relu", {"grad/y", "y"}},        {"Sigmoid", {"grad/y", "y"}},
      {"Sqrt", {"grad/y", "y"}},        {"Softmax", {"grad/y", "y"}},
      {"Clip", {"grad/y", "h"}},        {"HardSigmoid", {"grad/y", "h"}},
      {"HardSwish", {"grad/y", "h"}},   {"Erf", {"grad/y", "h"}},
      {"Transpose", {"grad/y"}},        {"Cast", {"grad/y"}},
      {"Exp", {"grad/y", "y"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    ModelBuilder b = with_h();
    b.node(c.op, "op", {"h"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const TrainingGraph& g = ts.graph;
    const Step& grad = find_step(g, std::string(c.op) + "Grad");
    CHECK(names(g, grad.inputs) == c.expected_inputs);
    CHECK(names(g, grad.outputs) == Names{"grad/h"});
    CHECK(grad.phase == Phase::backward);
    CHECK(grad.node == "op");
  }
}

TEST_CASE("binary rules") {
  struct Case { const char* op; Names expected_inputs; };
  const Case cases[] = {
      {"Add", {"grad/y"}},
      {"Sub", {"grad/y"}},
      {"Mul", {"grad/y", "h2", "h"}},
      {"Div", {"grad/y", "h2", "h"}},
      {"Pow", {"grad/y", "h", "h2", "y"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    ModelBuilder b = with_h();
    b.param("p2", {2, 8}).node("Mul", "mul2", {"x", "p2"}, {{"h2", {2, 8}}});
    b.node(c.op, "op", {"h", "h2"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const Step& grad = find_step(ts.graph, std::string(c.op) + "Grad");
    CHECK(names(ts.graph, grad.inputs) == c.expected_inputs);
    CHECK(names(ts.graph, grad.outputs) == Names{"grad/h", "grad/h2"});
  }
}

TEST_CASE("Conv keeps its input and weight; the first conv computes no input gradient") {
  ModelBuilder b;
  b.input("x", {2, 3, 8, 8}).param("w1", {4, 3, 3, 3}).param("b1", {4});
  b.param("w2", {4, 4, 1, 1}).param("b2", {4});
  std::map<std::string, model::Attribute> pad1 = {{"pads", ints_attr({1, 1, 1, 1})},
                                                  {"kernel_shape", ints_attr({3, 3})}};
  b.node("Conv", "conv1", {"x", "w1", "b1"}, {{"a", {2, 4, 8, 8}}}, pad1);
  b.node("Conv", "conv2", {"a", "w2", "b2"}, {{"y", {2, 4, 8, 8}}});
  b.node("Flatten", "flat", {"y"}, {{"logits", {2, 256}}}).output("logits");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  std::vector<const Step*> grads;
  for (const auto& s : g.steps)
    if (s.op == "ConvGrad") grads.push_back(&s);
  REQUIRE(grads.size() == 2);
  // conv2 first in backward: dX needs w2, dW needs a.
  CHECK(names(g, grads[0]->inputs) == Names{"grad/y", "w2", "a"});
  CHECK(names(g, grads[0]->outputs) == Names{"grad/a", "grad/w2", "grad/b2"});
  // conv1: x is the batch, which needs no gradient: only dW (needs x) and dB.
  CHECK(names(g, grads[1]->inputs) == Names{"grad/a", "x"});
  CHECK(names(g, grads[1]->outputs) == Names{"grad/w1", "grad/b1"});
  // Workspace: conv1 is 3x3 with padding: im2col = N*Ho*Wo*Cin*kh*kw*4 = 2*64*27*4 bytes.
  const Step& conv1 = g.step(0);
  REQUIRE(conv1.workspace != kNoTensor);
  CHECK(g.tensor(conv1.workspace).bytes == 2 * 64 * 27 * 4);
  CHECK(g.tensor(conv1.workspace).kind == TensorKind::workspace);
  CHECK(grads[1]->workspace != kNoTensor);
  // conv2 is 1x1, stride 1, no padding: a plain matrix product, no workspace.
  CHECK(g.step(1).workspace == kNoTensor);
  CHECK(grads[0]->workspace == kNoTensor);
  // FLOPs: conv1 = outputs (2*4*8*8) * (2 * 3*3*3 + 1 for the bias).
  CHECK(conv1.flops == doctest::Approx(512.0 * 55));
  CHECK(grads[1]->flops == doctest::Approx(2 * 512.0 * 55));
  // Flatten is a view: logits is y's storage.
  CHECK(g.tensor(ts.logits).name == "y");
  CHECK(g.tensor(ts.logits).aliases == Names{"logits"});
}

TEST_CASE("BatchNormalization keeps input, scale and saved statistics; running stats are buffers") {
  ModelBuilder b;
  b.input("x", {2, 4, 3, 3}).param("w", {4, 4, 1, 1});
  b.param("scale", {4}).param("bias", {4}).param("mean", {4}).param("var", {4});
  b.node("Conv", "conv", {"x", "w"}, {{"h", {2, 4, 3, 3}}});
  b.node("BatchNormalization", "bn", {"h", "scale", "bias", "mean", "var"},
         {{"y", {2, 4, 3, 3}}, {"mean_out", {4}}, {"var_out", {4}}},
         {{"training_mode", int_attr(1)}});
  b.node("Flatten", "flat", {"y"}, {{"logits", {2, 36}}}).output("logits");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  const Step& bn = find_step(g, "BatchNormalization");
  CHECK(names(g, bn.outputs) == Names{"y", "bn/saved_mean", "bn/saved_inv_std", "mean", "var"});
  CHECK(names(g, bn.inputs) == Names{"h", "scale", "bias", "mean", "var"});
  const Step& grad = find_step(g, "BatchNormalizationGrad");
  CHECK(names(g, grad.inputs) == Names{"grad/y", "h", "scale", "bn/saved_mean", "bn/saved_inv_std"});
  CHECK(names(g, grad.outputs) == Names{"grad/h", "grad/scale", "grad/bias"});
  CHECK(g.tensor(id(g, "mean")).kind == TensorKind::buffer);
  CHECK(g.tensor(id(g, "var")).kind == TensorKind::buffer);
  CHECK(g.tensor(id(g, "scale")).kind == TensorKind::parameter);
  CHECK(g.tensor(id(g, "mean")).aliases == Names{"mean_out"});
  CHECK_FALSE(ts.looks_like_inference_export);
}

TEST_CASE("pooling, reductions and matrix products") {
  SUBCASE("MaxPool keeps input and output") {
    ModelBuilder b;
    b.input("x", {2, 1, 4, 4}).param("p", {2, 1, 4, 4});
    b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 1, 4, 4}}});
    b.node("MaxPool", "pool", {"h"}, {{"y", {2, 1, 2, 2}}},
           {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
    b.node("Flatten", "flat", {"y"}, {{"logits", {2, 4}}}).output("logits");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "MaxPoolGrad").inputs) == Names{"grad/y", "h", "y"});
    CHECK(find_step(ts.graph, "MaxPool").flops == doctest::Approx(8.0 * 4));
  }
  SUBCASE("MaxPool with pool_indices keeps input and int64 indices, not its output") {
    for (bool model_has_indices : {false, true}) {
      CAPTURE(model_has_indices);
      ModelBuilder b;
      b.input("x", {2, 1, 4, 4}).param("p", {2, 1, 4, 4});
      b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 1, 4, 4}}});
      std::vector<std::pair<std::string, Shape>> outs = {{"y", {2, 1, 2, 2}}};
      if (model_has_indices) outs.push_back({"idx", {2, 1, 2, 2}});
      b.node("MaxPool", "pool", {"h"}, outs,
             {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
      if (model_has_indices) b.m.values[static_cast<size_t>(b.m.find("idx"))].dtype = DType::i64;
      b.node("Flatten", "flat", {"y"}, {{"logits", {2, 4}}}).output("logits");
      training::TrainingOptions o;
      o.pool_indices = !model_has_indices;  // an Indices output of the model works so anyway
      auto ts = training::build_training_step(b.m, o);
      const TrainingGraph& g = ts.graph;
      const std::string idx = model_has_indices ? "idx" : "pool/indices";
      const Step& fwd = find_step(g, "MaxPool");
      CHECK(names(g, fwd.outputs) == Names{"y", idx});
      CHECK(g.tensor(fwd.outputs[1]).dtype == DType::i64);
      CHECK(g.tensor(fwd.outputs[1]).bytes == 2 * 1 * 2 * 2 * 8);
      CHECK(g.tensor(fwd.outputs[1]).kind == TensorKind::activation);
      CHECK(names(g, find_step(g, "MaxPoolGrad").inputs) == Names{"grad/y", "h", idx});
    }
  }
  for (const char* op : {"AveragePool", "GlobalAveragePool", "ReduceMean"}) {
    CAPTURE(op);
    ModelBuilder b;
    b.input("x", {2, 1, 4, 4}).param("p", {2, 1, 4, 4});
    b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 1, 4, 4}}});
    std::map<std::string, model::Attribute> attrs;
    if (std::string(op) == "AveragePool") attrs["kernel_shape"] = ints_attr({4, 4});
    b.node(op, "pool", {"h"}, {{"y", {2, 1, 1, 1}}}, attrs);
    b.node("Flatten", "flat", {"y"}, {{"logits", {2, 1}}}).output("logits");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, std::string(op) + "Grad").inputs) == Names{"grad/y"});
  }
  SUBCASE("Gemm keeps A for dB and B for dA") {
    ModelBuilder b = with_h();
    b.param("W", {4, 8}).param("B", {4});
    b.node("Gemm", "fc", {"h", "W", "B"}, {{"y", {2, 4}}}, {{"transB", int_attr(1)}}).output("y");
    auto ts = build(b);
    const Step& grad = find_step(ts.graph, "GemmGrad");
    CHECK(names(ts.graph, grad.inputs) == Names{"grad/y", "W", "h"});
    CHECK(names(ts.graph, grad.outputs) == Names{"grad/h", "grad/W", "grad/B"});
    CHECK(find_step(ts.graph, "Gemm").flops == doctest::Approx(8.0 * (2 * 8 + 1)));
  }
  SUBCASE("MatMul") {
    ModelBuilder b = with_h();
    b.param("W", {8, 4});
    b.node("MatMul", "mm", {"h", "W"}, {{"y", {2, 4}}}).output("y");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "MatMulGrad").inputs) == Names{"grad/y", "W", "h"});
  }
}

TEST_CASE("data movement rules need no forward tensor") {
  SUBCASE("Concat and Split") {
    ModelBuilder b = with_h();
    b.param("p2", {2, 8}).node("Mul", "mul2", {"x", "p2"}, {{"h2", {2, 8}}});
    b.node("Concat", "cat", {"h", "h2"}, {{"c", {2, 16}}}, {{"axis", int_attr(1)}});
    b.node("Split", "split", {"c"}, {{"s0", {2, 8}}, {"s1", {2, 8}}}, {{"axis", int_attr(1)}});
    b.node("Add", "add", {"s0", "s1"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "ConcatGrad").inputs) == Names{"grad/c"});
    CHECK(names(ts.graph, find_step(ts.graph, "ConcatGrad").outputs) == Names{"grad/h", "grad/h2"});
    CHECK(names(ts.graph, find_step(ts.graph, "SplitGrad").inputs) == Names{"grad/s0", "grad/s1"});
  }
  for (const char* op : {"Slice", "Pad", "Expand"}) {
    CAPTURE(op);
    ModelBuilder b = with_h();
    b.constant("arg", DType::i64, {2}, {0, 0});
    b.node(op, "op", {"h", "arg"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const Step& fwd = find_step(ts.graph, op);
    CHECK(names(ts.graph, fwd.inputs) == Names{"h"});  // the shape argument is not a tensor
    CHECK(names(ts.graph, find_step(ts.graph, std::string(op) + "Grad").inputs) == Names{"grad/y"});
  }
  SUBCASE("Gather keeps its indices") {
    ModelBuilder b = with_h();
    b.constant("idx", DType::i64, {2}, {0, 1});
    b.node("Gather", "gather", {"h", "idx"}, {{"y", {2, 2}}}, {{"axis", int_attr(1)}}).output("y");
    auto ts = build(b);
    const TrainingGraph& g = ts.graph;
    CHECK(names(g, find_step(g, "GatherGrad").inputs) == Names{"grad/y", "idx"});
    CHECK(g.tensor(id(g, "idx")).kind == TensorKind::buffer);
  }
  SUBCASE("LRN keeps input and output") {
    ModelBuilder b;
    b.input("x", {2, 4, 2, 2}).param("p", {2, 4, 2, 2});
    b.node("Mul", "mul", {"x", "p"}, {{"h", {2, 4, 2, 2}}});
    b.node("LRN", "lrn", {"h"}, {{"y", {2, 4, 2, 2}}}, {{"size", int_attr(3)}});
    b.node("Flatten", "flat", {"y"}, {{"logits", {2, 16}}}).output("logits");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "LRNGrad").inputs) == Names{"grad/y", "h", "y"});
  }
}

TEST_CASE("Dropout in training keeps its mask; with ratio 0 it is a view") {
  for (double ratio : {0.5, 0.0}) {
    CAPTURE(ratio);
    ModelBuilder b = with_h();
    b.constant("ratio", DType::f32, {}, {}, {ratio});
    b.constant("training", DType::boolean, {}, {1});
    b.node("Dropout", "drop", {"h", "ratio", "training"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    const TrainingGraph& g = ts.graph;
    if (ratio > 0) {
      const Step& fwd = find_step(g, "Dropout");
      CHECK(names(g, fwd.outputs) == Names{"y", "drop/mask"});
      CHECK(g.tensor(fwd.outputs[1]).dtype == DType::boolean);
      CHECK(names(g, find_step(g, "DropoutGrad").inputs) == Names{"grad/y", "drop/mask"});
    } else {
      for (const auto& s : g.steps) CHECK(s.op != "Dropout");
      CHECK(g.tensor(ts.logits).name == "h");
    }
  }
}

TEST_CASE("a tensor read twice gets its gradients summed in place") {
  ModelBuilder b = with_h();
  b.node("Relu", "relu", {"h"}, {{"r", {2, 8}}});
  b.node("Add", "add", {"h", "r"}, {{"y", {2, 8}}}).output("y");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  // Backward order: loss grad, AddGrad (writes grad/h and grad/r), ReluGrad (writes a second
  // gradient of h), GradSum (adds it into grad/h in place), MulGrad.
  Names ops;
  for (const auto& s : g.steps)
    if (s.phase == Phase::backward) ops.push_back(s.op);
  CHECK(ops == Names{"SoftmaxCrossEntropyLossGrad", "AddGrad", "ReluGrad", "GradSum", "MulGrad"});
  const Step& sum = find_step(g, "GradSum");
  CHECK(names(g, sum.inputs) == Names{"grad/h", "grad/h/relu"});
  CHECK(names(g, sum.outputs) == Names{"grad/h"});
  CHECK(names(g, find_step(g, "MulGrad").inputs) == Names{"grad/h", "x"});
}

TEST_CASE("loss, labels and the step's phases") {
  ModelBuilder b = with_h();
  b.node("Relu", "relu", {"h"}, {{"y", {2, 8}}}).output("y");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  const Step& loss = find_step(g, "SoftmaxCrossEntropyLoss");
  CHECK(loss.phase == Phase::loss);
  CHECK(names(g, loss.inputs) == Names{"y", "label"});
  CHECK(names(g, loss.outputs) == Names{"loss", "loss/log_prob"});
  CHECK(g.tensor(ts.label).kind == TensorKind::label);
  CHECK(g.tensor(ts.label).dtype == DType::i64);
  CHECK(g.tensor(ts.label).shape == Shape{2});
  CHECK(names(g, find_step(g, "SoftmaxCrossEntropyLossGrad").inputs) == Names{"loss/log_prob", "label"});
  // Phases never go back.
  for (size_t i = 1; i < g.steps.size(); ++i) CHECK(g.steps[i - 1].phase <= g.steps[i].phase);
  CHECK(g.tensor(id(g, "x")).kind == TensorKind::input);
  CHECK(g.tensor(id(g, "p")).kind == TensorKind::parameter);
  CHECK(g.tensor(id(g, "grad/p")).kind == TensorKind::gradient);
  CHECK(g.tensor(id(g, "grad/h")).kind == TensorKind::activation_grad);
}

TEST_CASE("optimizers: one in-place update per parameter with its state") {
  ModelBuilder b = with_h();
  b.param("W", {4, 8});
  b.node("Gemm", "fc", {"h", "W"}, {{"y", {2, 4}}}, {{"transB", int_attr(1)}}).output("y");
  SUBCASE("sgd") {
    auto ts = build(b, training::Optimizer::sgd);
    const TrainingGraph& g = ts.graph;
    Names updates;
    for (const auto& s : g.steps)
      if (s.phase == Phase::optimizer) updates.push_back(g.tensor(s.outputs[0]).name);
    CHECK(updates == Names{"p", "W"});
    CHECK(names(g, find_step(g, "SGD").inputs) == Names{"p", "grad/p"});
  }
  SUBCASE("momentum") {
    auto ts = build(b, training::Optimizer::momentum);
    const TrainingGraph& g = ts.graph;
    const Step& s = find_step(g, "SGDMomentum");
    CHECK(names(g, s.inputs) == Names{"p", "grad/p", "p/momentum"});
    CHECK(names(g, s.outputs) == Names{"p", "p/momentum"});
    CHECK(g.tensor(id(g, "W/momentum")).kind == TensorKind::optimizer_state);
  }
  SUBCASE("adam") {
    auto ts = build(b, training::Optimizer::adam);
    const TrainingGraph& g = ts.graph;
    const Step& s = find_step(g, "Adam");
    CHECK(names(g, s.inputs) == Names{"p", "grad/p", "p/adam_m", "p/adam_v"});
    CHECK(g.tensor(id(g, "W/adam_v")).bytes == 4 * 8 * 4);
  }
}

TEST_CASE("a model in inference form is flagged") {
  ModelBuilder b;
  b.input("x", {2, 3, 4, 4}).param("w", {2, 3, 1, 1}).param("bias", {2});
  b.node("Conv", "conv", {"x", "w", "bias"}, {{"y", {2, 2, 4, 4}}});
  b.node("Flatten", "flat", {"y"}, {{"logits", {2, 32}}}).output("logits");
  auto ts = build(b);
  CHECK(ts.looks_like_inference_export);
  CHECK(ts.inference_hint.find("TrainingMode.TRAINING") != std::string::npos);
}

TEST_CASE("every rule's needs refer to its differentiable inputs") {
  for (const auto& r : training::gradient_rules()) {
    CAPTURE(r.op);
    if (r.op_class != training::OpClass::compute || r.data_inputs < 0) continue;
    CHECK(r.needs.size() == r.differentiable.size());
    CHECK((r.needs_with_second_output.empty() ||
           r.needs_with_second_output.size() == r.differentiable.size()));
    for (int i : r.differentiable) CHECK(i < r.data_inputs);
  }
}

TEST_CASE("a model whose first output has no [batch, ...] shape is refused") {
  ModelBuilder b;
  b.input("x", {2, 3, 4, 4}).param("w", {2, 3, 1, 1});
  b.node("Conv", "conv", {"x", "w"}, {{"c", {2, 2, 4, 4}}});
  b.node("ReduceMean", "mean", {"c"}, {{"y", {2}}}, {{"axes", ints_attr({1, 2, 3})}, {"keepdims", int_attr(0)}})
      .output("y");
  CHECK_THROWS_WITH_AS(build(b), doctest::Contains("of shape [batch, ...] (rank 2 or more)"), Error);
}

TEST_CASE("LayerNormalization keeps input, scale and its saved statistics") {
  ModelBuilder b = with_h();
  b.param("ln_scale", {8}).param("ln_bias", {8});
  b.node("LayerNormalization", "ln", {"h", "ln_scale", "ln_bias"}, {{"y", {2, 8}}},
         {{"axis", int_attr(-1)}}).output("y");
  auto ts = build(b);
  const TrainingGraph& g = ts.graph;
  const Step& fwd = find_step(g, "LayerNormalization");
  CHECK(names(g, fwd.outputs) == Names{"y", "ln/saved_mean", "ln/saved_inv_std"});
  CHECK(g.tensor(fwd.outputs[1]).shape == Shape{2, 1});
  CHECK(names(g, find_step(g, "LayerNormalizationGrad").inputs) ==
        Names{"grad/y", "h", "ln_scale", "ln/saved_mean", "ln/saved_inv_std"});
  CHECK(names(g, find_step(g, "LayerNormalizationGrad").outputs) ==
        Names{"grad/h", "grad/ln_scale", "grad/ln_bias"});
}

TEST_CASE("resizing, negation and selection rules") {
  for (const char* op : {"Upsample", "Resize", "Neg"}) {
    CAPTURE(op);
    ModelBuilder b = with_h();
    b.constant("scales", DType::f32, {2}, {}, {1.0, 1.0});
    b.node(op, "op", {"h", "scales"}, {{"y", {2, 8}}}).output("y");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, op).inputs) == Names{"h"});
    CHECK(names(ts.graph, find_step(ts.graph, std::string(op) + "Grad").inputs) == Names{"grad/y"});
  }
  ModelBuilder b = with_h();
  b.param("p2", {2, 8}).node("Mul", "mul2", {"x", "p2"}, {{"h2", {2, 8}}});
  b.constant("cond", DType::boolean, {2, 8}, std::vector<int64_t>(16, 1));
  b.node("Where", "where", {"cond", "h", "h2"}, {{"y", {2, 8}}}).output("y");
  auto ts = build(b);
  CHECK(names(ts.graph, find_step(ts.graph, "WhereGrad").inputs) == Names{"grad/y", "cond"});
  CHECK(names(ts.graph, find_step(ts.graph, "WhereGrad").outputs) == Names{"grad/h", "grad/h2"});
}

TEST_CASE("ScatterND: data and updates get gradients from the indices; integer Mod none") {
  auto scatter = [](const char* reduction) {
    ModelBuilder b = with_h();
    b.param("up", {1, 8}).constant("row", DType::i64, {1, 1}, {1});
    std::map<std::string, model::Attribute> attrs;
    if (reduction) {
      attrs["reduction"].kind = model::Attribute::Kind::s;
      attrs["reduction"].s = reduction;
    }
    b.node("ScatterND", "scatter", {"h", "row", "up"}, {{"y", {2, 8}}}, attrs).output("y");
    return b;
  };
  for (const char* reduction : {static_cast<const char*>(nullptr), "add"}) {
    CAPTURE(reduction ? reduction : "none");
    auto ts = build(scatter(reduction));
    CHECK(names(ts.graph, find_step(ts.graph, "ScatterNDGrad").inputs) == Names{"grad/y", "row"});
    CHECK(names(ts.graph, find_step(ts.graph, "ScatterNDGrad").outputs) == Names{"grad/h", "grad/up"});
  }
  CHECK_THROWS_WITH_AS(build(scatter("mul")), doctest::Contains("with reduction 'mul' into a tensor that needs a gradient"),
                       Error);

  // Window indices computed at run time from integers: Mod runs, nothing flows back through it.
  ModelBuilder b = with_h();
  b.constant("i", DType::i64, {2}, {3, 4}).constant("two", DType::i64, {}, {2});
  b.node("Mod", "mod", {"i", "two"}, {{"r", {2}}}, {}, DType::i64);
  b.node("Gather", "gather", {"h", "r"}, {{"y", {2, 8}}}).output("y");
  auto ts = build(b);
  CHECK(find_step(ts.graph, "Mod").outputs.size() == 1);
  for (const Step& s : ts.graph.steps) CHECK(s.op != "ModGrad");
  CHECK(names(ts.graph, find_step(ts.graph, "GatherGrad").outputs) == Names{"grad/h"});
}

TEST_CASE("ReduceL2 keeps its input and result; Einsum each operand for the other's gradient") {
  SUBCASE("ReduceL2 (torch's norm)") {
    ModelBuilder b = with_h();
    b.node("ReduceL2", "norm", {"h"}, {{"y", {2, 1}}}, {{"axes", ints_attr({1})}}).output("y");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "ReduceL2Grad").inputs) == Names{"grad/y", "h", "y"});
    CHECK(names(ts.graph, find_step(ts.graph, "ReduceL2Grad").outputs) == Names{"grad/h"});
    CHECK(find_step(ts.graph, "ReduceL2").flops == doctest::Approx(2.0 * 16));
  }
  SUBCASE("Einsum, as a matrix product") {
    ModelBuilder b = with_h();
    b.param("W", {4, 8});
    model::Attribute eq;
    eq.kind = model::Attribute::Kind::s;
    eq.s = "i j, k j -> i k";
    b.node("Einsum", "es", {"h", "W"}, {{"y", {2, 4}}}, {{"equation", eq}}).output("y");
    auto ts = build(b);
    CHECK(names(ts.graph, find_step(ts.graph, "EinsumGrad").inputs) == Names{"grad/y", "W", "h"});
    CHECK(names(ts.graph, find_step(ts.graph, "EinsumGrad").outputs) == Names{"grad/h", "grad/W"});
    // i 2, j 8, k 4: 64 multiply-adds.
    CHECK(find_step(ts.graph, "Einsum").flops == doctest::Approx(2.0 * 2 * 8 * 4));
  }
}
