#include "training/gradient_rules.h"

#include <algorithm>

namespace autovm::training {
namespace {

constexpr Ref in(int i) { return Ref{false, i}; }
constexpr Ref out(int i) { return Ref{true, i}; }

// Each of up to 8 inputs needs every input.
std::vector<std::vector<Ref>> variadic_needs() {
  std::vector<Ref> all;
  for (int i = 0; i < 8; ++i) all.push_back(in(i));
  return std::vector<std::vector<Ref>>(8, all);
}

std::vector<GradientRule> make_rules() {
  using C = OpClass;
  std::vector<GradientRule> r = {
      // Convolution: dX = convT(dY, W) needs W; dW = conv(X, dY) needs X; dB = sum(dY).
      {"Conv", C::compute, 3, {0, 1, 2}, {{in(1)}, {in(0)}, {}}, 2},
      // Batch norm (training): outputs [Y, saved_mean, saved_inv_std]; inputs 3 and 4 are the
      // running statistics, updated in place. dX and dScale need X, scale and the statistics.
      {"BatchNormalization", C::compute, 5, {0, 1, 2},
       {{in(0), in(1), out(1), out(2)}, {in(0), out(1), out(2)}, {}}, 2},
      // Layer norm: outputs [Y, saved_mean, saved_inv_std], like batch norm without running
      // statistics.
      {"LayerNormalization", C::compute, 3, {0, 1, 2},
       {{in(0), in(1), out(1), out(2)}, {in(0), out(1), out(2)}, {}}, 2},
      // Transposed convolution: dX = conv(dY, W) needs W; dW = conv(dY, X) needs X; dB = sum(dY).
      {"ConvTranspose", C::compute, 3, {0, 1, 2}, {{in(1)}, {in(0)}, {}}, 2},
      // Instance and group norm: outputs [Y, saved_mean, saved_inv_std], one statistic per
      // (sample, channel) and per (sample, group); like layer norm otherwise.
      {"InstanceNormalization", C::compute, 3, {0, 1, 2},
       {{in(0), in(1), out(1), out(2)}, {in(0), out(1), out(2)}, {}}, 2},
      {"GroupNormalization", C::compute, 3, {0, 1, 2},
       {{in(0), in(1), out(1), out(2)}, {in(0), out(1), out(2)}, {}}, 2},
      {"Relu", C::compute, 1, {0}, {{out(0)}}, 1},
      // Activations whose derivative is a function of the input (what autograd saves for
      // leaky_relu, elu, selu, softplus, mish and gelu), or of the output (tanh).
      {"LeakyRelu", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Elu", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Selu", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Softplus", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Mish", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Gelu", C::compute, 1, {0}, {{in(0)}}, 1},
      // x * sigmoid(x), fused from its decomposition (model/fusion/fusion.h): silu saves x.
      {"Silu", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Tanh", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Clip", C::compute, 1, {0}, {{in(0)}}, 1},
      {"HardSigmoid", C::compute, 1, {0}, {{in(0)}}, 1},
      {"HardSwish", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Sigmoid", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Erf", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Sqrt", C::compute, 1, {0}, {{out(0)}}, 1},
      // exp saves its result: d/dx = dY * Y.
      {"Exp", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Add", C::compute, 2, {0, 1}, {{}, {}}, 1},
      {"Sum", C::compute, -1, {}, {}, 1},  // every input differentiable; needs nothing
      // Elementwise Max and Min (up to 8 inputs, shape_rules_dense.cc): the gradient goes to
      // the input that is the extreme, found by comparing the inputs.
      {"Max", C::compute, -1, {0, 1, 2, 3, 4, 5, 6, 7}, variadic_needs(), 1},
      {"Min", C::compute, -1, {0, 1, 2, 3, 4, 5, 6, 7}, variadic_needs(), 1},
      {"Sub", C::compute, 2, {0, 1}, {{}, {}}, 1},
      {"Mul", C::compute, 2, {0, 1}, {{in(1)}, {in(0)}}, 2},
      {"Div", C::compute, 2, {0, 1}, {{in(1)}, {in(0), in(1)}}, 2},
      {"Pow", C::compute, 2, {0, 1}, {{in(0), in(1)}, {in(0), out(0)}}, 2},
      // Max pooling keeps its input and output (the output locates the maxima); with an
      // Indices output (TrainingOptions::pool_indices) its input and the indices instead.
      {"MaxPool", C::compute, 1, {0}, {{in(0), out(0)}}, 1, {{in(0), out(1)}}},
      {"AveragePool", C::compute, 1, {0}, {{}}, 1},
      {"GlobalAveragePool", C::compute, 1, {0}, {{}}, 1},
      {"ReduceMean", C::compute, 1, {0}, {{}}, 1},
      {"ReduceSum", C::compute, 1, {0}, {{}}, 1},
      // The 2-norm (torch's norm, which F.normalize calls): d/dx = dY * x / Y saves input and
      // result.
      {"ReduceL2", C::compute, 1, {0}, {{in(0), out(0)}}, 1},
      // Max reductions route dY to the maxima: input and output locate them.
      {"ReduceMax", C::compute, 1, {0}, {{in(0), out(0)}}, 1},
      {"GlobalMaxPool", C::compute, 1, {0}, {{in(0), out(0)}}, 1},
      {"Gemm", C::compute, 3, {0, 1, 2}, {{in(1)}, {in(0)}, {}}, 2},
      // x W^T + b over x's last axis, fused from MatMul, Transpose and Add (model/fusion/).
      {"Linear", C::compute, 3, {0, 1, 2}, {{in(1)}, {in(0)}, {}}, 2},
      {"MatMul", C::compute, 2, {0, 1}, {{in(1)}, {in(0)}}, 2},
      // Einsum of two operands (model/einsum.h): torch's einsum runs one batched matrix product
      // of (permuted, reshaped) operands, whose autograd node saves both, like MatMul.
      {"Einsum", C::compute, 2, {0, 1}, {{in(1)}, {in(0)}}, 2},
      // Fused attention (model/fusion/attention.cc): outputs [Y, logsumexp]. The backward
      // kernel recomputes the probabilities from Q, K and the logsumexp and needs Y for the
      // softmax's gradient, so each input's gradient reads Q, K, V, Y and the logsumexp; it
      // runs five products of the forward's two (recomputed scores, dV, dP, dQ, dK).
      {"ScaledDotProductAttention", C::compute, 3, {0, 1, 2},
       {{in(0), in(1), in(2), out(0), out(1)}, {in(0), in(1), in(2), out(0), out(1)},
        {in(0), in(1), in(2), out(0), out(1)}}, 2.5},
      {"Transpose", C::compute, 1, {0}, {{}}, 1},
      {"Concat", C::compute, -1, {}, {}, 1},  // every input differentiable; needs nothing
      {"Split", C::compute, 1, {0}, {{}}, 1},
      {"Slice", C::compute, 1, {0}, {{}}, 1},
      {"Pad", C::compute, 1, {0}, {{}}, 1},
      {"Expand", C::compute, 1, {0}, {{}}, 1},
      // Nearest/linear resizing: the gradient sums dY back over the input grid (shapes only).
      {"Resize", C::compute, 1, {0}, {{}}, 1},
      {"Upsample", C::compute, 1, {0}, {{}}, 1},
      {"Cast", C::compute, 1, {0}, {{}}, 1},
      {"Gather", C::compute, 2, {0}, {{in(1)}}, 1},
      {"Softmax", C::compute, 1, {0}, {{out(0)}}, 1},
      {"LRN", C::compute, 1, {0}, {{in(0), out(0)}}, 1},
      // Dropout (training): outputs [Y, mask]; dX = dY * mask / (1 - ratio).
      {"Dropout", C::compute, 1, {0}, {{out(1)}}, 1},
      {"Reshape", C::view, 1, {}, {}, 0},
      {"Flatten", C::view, 1, {}, {}, 0},
      {"Squeeze", C::view, 1, {}, {}, 0},
      {"Unsqueeze", C::view, 1, {}, {}, 0},
      {"Identity", C::view, 1, {}, {}, 0},
      {"Shape", C::non_differentiable, 1, {}, {}, 0},
      {"ConstantOfShape", C::non_differentiable, 0, {}, {}, 0},
      {"Constant", C::non_differentiable, 0, {}, {}, 0},
      {"Range", C::non_differentiable, 0, {}, {}, 0},
      {"Equal", C::non_differentiable, -1, {}, {}, 0},
      {"Not", C::non_differentiable, -1, {}, {}, 0},
      {"Less", C::non_differentiable, -1, {}, {}, 0},
      {"Greater", C::non_differentiable, -1, {}, {}, 0},
      {"LessOrEqual", C::non_differentiable, -1, {}, {}, 0},
      {"GreaterOrEqual", C::non_differentiable, -1, {}, {}, 0},
      // Reads only its input's shape: a generator of the step (the dynamo exporter's dropout
      // draws its mask with it).
      {"RandomUniformLike", C::non_differentiable, 0, {}, {}, 0},
      {"Neg", C::compute, 1, {0}, {{}}, 1},
      {"ReduceProd", C::non_differentiable, -1, {}, {}, 0},
      {"Where", C::compute, 3, {1, 2}, {{in(0)}, {in(0)}}, 1},
      // Mod: on integers (swin's window indices) its outputs carry no gradient; on floats
      // d/dA = dY and d/dB = -dY * (A - Y) / B (the quotient), which reads A and B.
      {"Mod", C::compute, 2, {0, 1}, {{}, {in(0), in(1)}}, 1},
      // ScatterND (reduction none or add; forward.cc refuses the others on a differentiable
      // path): d/data = dY with the scattered slices zeroed (none) or dY itself (add), and
      // d/updates = GatherND(dY, indices); both read the indices only.
      {"ScatterND", C::compute, 3, {0, 2}, {{in(1)}, {in(1)}}, 1},
  };
  std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.op < b.op; });
  return r;
}

}  // namespace

const std::vector<GradientRule>& gradient_rules() {
  static const std::vector<GradientRule> rules = make_rules();
  return rules;
}

const GradientRule* find_gradient_rule(std::string_view op) {
  const auto& rules = gradient_rules();
  auto it = std::lower_bound(rules.begin(), rules.end(), op,
                             [](const GradientRule& r, std::string_view o) { return r.op < o; });
  return it != rules.end() && it->op == op ? &*it : nullptr;
}

}  // namespace autovm::training
