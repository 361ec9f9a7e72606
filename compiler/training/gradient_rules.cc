#include "training/gradient_rules.h"

#include <algorithm>

namespace autovm::training {
namespace {

constexpr Ref in(int i) { return Ref{false, i}; }
constexpr Ref out(int i) { return Ref{true, i}; }

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
      {"Relu", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Clip", C::compute, 1, {0}, {{in(0)}}, 1},
      {"HardSigmoid", C::compute, 1, {0}, {{in(0)}}, 1},
      {"HardSwish", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Sigmoid", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Erf", C::compute, 1, {0}, {{in(0)}}, 1},
      {"Sqrt", C::compute, 1, {0}, {{out(0)}}, 1},
      {"Add", C::compute, 2, {0, 1}, {{}, {}}, 1},
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
      {"Gemm", C::compute, 3, {0, 1, 2}, {{in(1)}, {in(0)}, {}}, 2},
      {"MatMul", C::compute, 2, {0, 1}, {{in(1)}, {in(0)}}, 2},
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
      {"Neg", C::compute, 1, {0}, {{}}, 1},
      {"ReduceProd", C::non_differentiable, -1, {}, {}, 0},
      {"Where", C::compute, 3, {1, 2}, {{in(0)}, {in(0)}}, 1},
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
