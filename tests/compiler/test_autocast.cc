// torch.autocast in the training step (training/autocast.h), on hand-made models: which ops run
// in which dtype, the weights' cast copies and their gradients, GradScaler's steps.
#include <doctest/doctest.h>

#include "model_builder.h"
#include "training/training_step.h"

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::int_attr;
using autovm::test::ints_attr;

namespace {

using Names = std::vector<std::string>;

training::TrainingStep build(const ModelBuilder& b, training::Autocast a) {
  training::TrainingOptions o;
  o.autocast = a;
  return training::build_training_step(b.m, o);
}

const Tensor& tensor(const TrainingGraph& g, const std::string& name) {
  for (const auto& t : g.tensors)
    if (t.name == name) return t;
  FAIL("no tensor named " << name);
  return g.tensors.front();
}

Names names(const TrainingGraph& g, const std::vector<TensorId>& ids) {
  Names out;
  for (TensorId t : ids) out.push_back(g.tensor(t).name);
  return out;
}

// Steps of `phase` as "op node" strings, in order.
Names steps(const TrainingGraph& g, Phase phase) {
  Names out;
  for (const Step& s : g.steps)
    if (s.phase == phase) out.push_back(s.op + " " + s.node);
  return out;
}

const Step& step(const TrainingGraph& g, const std::string& op, const std::string& node) {
  for (const Step& s : g.steps)
    if (s.op == op && s.node == node) return s;
  FAIL("no step " << op << " " << node);
  return g.steps.front();
}

// x [2, 3, 4, 4] -> Conv(w [4, 3, 3, 3], pads 1) -> c -> BatchNormalization -> n -> Relu -> r
//   -> GlobalAveragePool -> gp [2, 4, 1, 1] -> Flatten -> f [2, 4] -> Gemm(fc_w [10, 4], fc_b)
ModelBuilder small_cnn() {
  ModelBuilder b;
  b.input("x", {2, 3, 4, 4}).param("w", {4, 3, 3, 3}).param("s", {4}).param("bb", {4});
  b.constant("rm", DType::f32, {4}, {}, {0, 0, 0, 0}).constant("rv", DType::f32, {4}, {}, {1, 1, 1, 1});
  b.param("fc_w", {10, 4}).param("fc_b", {10});
  b.node("Conv", "conv", {"x", "w"}, {{"c", {2, 4, 4, 4}}}, {{"pads", ints_attr({1, 1, 1, 1})}});
  b.node("BatchNormalization", "bn", {"c", "s", "bb", "rm", "rv"}, {{"n", {2, 4, 4, 4}}},
         {{"training_mode", int_attr(1)}});
  b.node("Relu", "relu", {"n"}, {{"r", {2, 4, 4, 4}}});
  b.node("GlobalAveragePool", "gap", {"r"}, {{"gp", {2, 4, 1, 1}}});
  b.node("Flatten", "flat", {"gp"}, {{"f", {2, 4}}});
  b.node("Gemm", "fc", {"f", "fc_w", "fc_b"}, {{"logits", {2, 10}}}, {{"transB", int_attr(1)}}).output("logits");
  return b;
}

}  // namespace

TEST_CASE("bf16 autocast: convolution and linear in bf16 from cast copies, fp32 parameters and gradients") {
  auto ts = build(small_cnn(), training::Autocast::bf16);
  const TrainingGraph& g = ts.graph;
  CHECK(steps(g, Phase::forward) == Names{"Cast conv", "Cast conv", "Conv conv", "BatchNormalization bn",
                                          "Relu relu", "GlobalAveragePool gap", "Cast fc", "Cast fc", "Gemm fc"});
  CHECK(names(g, step(g, "Conv", "conv").inputs) == Names{"conv/x/autocast_bf16", "w/autocast_bf16"});
  CHECK(tensor(g, "conv/x/autocast_bf16").dtype == DType::bf16);
  CHECK(tensor(g, "w/autocast_bf16").bytes == 108 * 2);
  CHECK(tensor(g, "w/autocast_bf16").kind == TensorKind::activation);
  // Every activation downstream is bf16 (batch norm keeps its input's dtype); its statistics
  // and the loss's log-probabilities are fp32.
  for (const char* t : {"c", "n", "r", "gp", "logits"}) CHECK_MESSAGE(tensor(g, t).dtype == DType::bf16, t);
  CHECK(tensor(g, "bn/saved_mean").dtype == DType::f32);
  CHECK(tensor(g, "loss/log_prob").dtype == DType::f32);
  CHECK(tensor(g, "c").bytes == 128 * 2);
  // The convolution's workspace: 2 * 16 * 27 elements of bf16.
  CHECK(g.tensor(step(g, "Conv", "conv").workspace).bytes == 864 * 2);

  // Backward: the linear layer's and convolution's weight gradients are bf16 gradients of the
  // copies; the casts' backward turns them into fp32 gradients of the parameters.
  CHECK(names(g, step(g, "GemmGrad", "fc").inputs) == Names{"grad/logits", "fc_w/autocast_bf16", "gp"});
  CHECK(names(g, step(g, "GemmGrad", "fc").outputs) ==
        Names{"grad/gp", "grad/fc_w/autocast_bf16", "grad/fc_b/autocast_bf16"});
  CHECK(tensor(g, "grad/fc_w/autocast_bf16").dtype == DType::bf16);
  CHECK(names(g, step(g, "ConvGrad", "conv").inputs) == Names{"grad/c", "conv/x/autocast_bf16"});
  CHECK(names(g, step(g, "ConvGrad", "conv").outputs) == Names{"grad/w/autocast_bf16"});
  int cast_grads = 0;
  for (const Step& s : g.steps) {
    if (s.op != "CastGrad") continue;
    ++cast_grads;
    const Tensor& out = g.tensor(s.outputs[0]);
    CHECK(out.kind == TensorKind::gradient);
    CHECK(out.dtype == DType::f32);
  }
  CHECK(cast_grads == 3);  // w, fc_w, fc_b; the input's copy needs no gradient
  CHECK(tensor(g, "grad/w").dtype == DType::f32);
  CHECK(names(g, step(g, "SGD", "").inputs) == Names{"w", "grad/w"});
  CHECK(steps(g, Phase::optimizer).size() == 5);  // no GradScaler with bf16
}

TEST_CASE("fp16 autocast: GradScaler unscales and checks every gradient before the optimizer") {
  auto ts = build(small_cnn(), training::Autocast::fp16);
  const TrainingGraph& g = ts.graph;
  CHECK(tensor(g, "c").dtype == DType::f16);
  CHECK(tensor(g, "w/autocast_fp16").dtype == DType::f16);
  Names opt = steps(g, Phase::optimizer);
  REQUIRE(opt.size() == 7);
  CHECK(opt.front() == "GradScalerUnscale ");
  CHECK(opt.back() == "GradScalerUpdate ");
  const Step& unscale = g.steps[static_cast<size_t>(step(g, "GradScalerUnscale", "").id)];
  CHECK(names(g, unscale.inputs) == Names{"grad/w", "grad/s", "grad/bb", "grad/fc_w", "grad/fc_b", "grad_scaler/scale"});
  CHECK(names(g, unscale.outputs) == Names{"grad/w", "grad/s", "grad/bb", "grad/fc_w", "grad/fc_b", "grad_scaler/found_inf"});
  CHECK(unscale.flops == 2.0 * (108 + 4 + 4 + 40 + 10));
  CHECK(names(g, step(g, "GradScalerUpdate", "").inputs) == Names{"grad_scaler/scale", "grad_scaler/found_inf"});
}

TEST_CASE("autocast: one cast copy per weight; type promotion; fp32 ops cast up") {
  // x [2, 8] -> Gemm(w) -> h (bf16) -> Gemm(w) again -> h2 (bf16, the same copy of w)
  //   Add(h2, p fp32) -> a: fp32 by type promotion; Softmax (fp32 list) of h: cast up first.
  ModelBuilder b;
  b.input("x", {2, 8}).param("w", {8, 8}).param("p", {2, 8});
  b.node("Gemm", "fc1", {"x", "w"}, {{"h", {2, 8}}});
  b.node("Gemm", "fc2", {"h", "w"}, {{"h2", {2, 8}}});
  b.node("Add", "add", {"h2", "p"}, {{"a", {2, 8}}});
  b.node("Softmax", "soft", {"h"}, {{"sm", {2, 8}}}, {{"axis", int_attr(1)}});
  b.node("Concat", "cat", {"a", "sm"}, {{"logits", {2, 16}}}, {{"axis", int_attr(1)}}).output("logits");
  auto ts = build(b, training::Autocast::bf16);
  const TrainingGraph& g = ts.graph;
  CHECK(steps(g, Phase::forward) ==
        Names{"Cast fc1", "Cast fc1", "Gemm fc1", "Gemm fc2", "Add add", "Cast soft", "Softmax soft", "Concat cat"});
  CHECK(names(g, step(g, "Gemm", "fc2").inputs) == Names{"h", "w/autocast_bf16"});
  CHECK(tensor(g, "h2").dtype == DType::bf16);
  CHECK(tensor(g, "a").dtype == DType::f32);
  CHECK(names(g, step(g, "Softmax", "soft").inputs) == Names{"soft/h/autocast_fp32"});
  CHECK(tensor(g, "sm").dtype == DType::f32);
  CHECK(tensor(g, "logits").dtype == DType::f32);  // cat of two fp32 tensors
  // Both linear layers' weight gradients land in the one copy's gradient, then one cast to fp32.
  int cast_grads = 0;
  for (const Step& s : g.steps) cast_grads += s.op == "CastGrad" && g.tensor(s.outputs[0]).name == "grad/w";
  CHECK(cast_grads == 1);

  SUBCASE("no autocast: the model's dtypes, no casts") {
    auto plain = training::build_training_step(b.m, {});
    for (const Step& s : plain.graph.steps) CHECK(s.op != "Cast");
    CHECK(tensor(plain.graph, "h").dtype == DType::f32);
  }
  CHECK(training::parse_autocast("bf16") == training::Autocast::bf16);
  CHECK(training::parse_autocast("fp8") == std::nullopt);
  CHECK(training::name(training::Autocast::fp16) == "fp16");
}

TEST_CASE("autocast: a zero-dim fp32 constant does not widen a bf16 tensor (q * scale)") {
  // h = Gemm (bf16); s = Mul(h, c) with c an fp32 scalar: bf16; t = Mul(h, r) with r an fp32
  // tensor of dims [8]: fp32, as PyTorch promotes.
  ModelBuilder b;
  b.input("x", {2, 8}).param("w", {8, 8});
  b.constant("c", DType::f32, {}, {}, {0.125}).constant("r", DType::f32, {8}, {}, std::vector<double>(8, 0.5));
  b.node("Gemm", "fc", {"x", "w"}, {{"h", {2, 8}}});
  b.node("Mul", "scale", {"h", "c"}, {{"s", {2, 8}}});
  b.node("Mul", "rescale", {"h", "r"}, {{"t", {2, 8}}});
  b.node("Concat", "cat", {"s", "t"}, {{"logits", {2, 16}}}, {{"axis", int_attr(1)}}).output("logits");
  const TrainingGraph g = build(b, training::Autocast::bf16).graph;
  CHECK(tensor(g, "s").dtype == DType::bf16);
  CHECK(tensor(g, "t").dtype == DType::f32);
}

TEST_CASE("autocast: norm computes in fp32 from its bf16 input (no copy); exp casts; einsum lowers") {
  // h = Gemm (bf16). ReduceL2 reads h itself and writes fp32 (autocast appends dtype=float);
  // Exp is on the fp32 list: a cast copy of h first; Einsum is on the lower list.
  ModelBuilder b;
  b.input("x", {2, 8}).param("w", {8, 8}).param("v", {8, 8});
  model::Attribute eq;
  eq.kind = model::Attribute::Kind::s;
  eq.s = "ij,jk->ik";
  b.node("Gemm", "fc", {"x", "w"}, {{"h", {2, 8}}});
  b.node("ReduceL2", "norm", {"h"}, {{"n", {2, 1}}}, {{"axes", ints_attr({1})}});
  b.node("Exp", "exp", {"h"}, {{"e", {2, 8}}});
  b.node("Einsum", "es", {"e", "v"}, {{"z", {2, 8}}}, {{"equation", eq}});
  b.node("Mul", "scale", {"z", "n"}, {{"logits", {2, 8}}}).output("logits");
  const TrainingGraph g = build(b, training::Autocast::bf16).graph;
  CHECK(names(g, step(g, "ReduceL2", "norm").inputs) == Names{"h"});
  CHECK(tensor(g, "h").dtype == DType::bf16);
  CHECK(tensor(g, "n").dtype == DType::f32);
  CHECK(names(g, step(g, "Exp", "exp").inputs) == Names{"exp/h/autocast_fp32"});
  CHECK(tensor(g, "e").dtype == DType::f32);
  CHECK(names(g, step(g, "Einsum", "es").inputs) == Names{"es/e/autocast_bf16", "v/autocast_bf16"});
  CHECK(tensor(g, "z").dtype == DType::bf16);
  CHECK(training::autocast_list("ReduceL2") == training::AutocastList::fp32_dtype);
}
