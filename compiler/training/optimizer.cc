// Pass: the optimizer. After backward, one in-place update step per parameter that received a
// gradient, in parameter order. State tensors: momentum keeps a velocity, Adam its first and
// second moments; all live across training steps.
#include "training/passes.h"

namespace autovm::training {

std::string_view name(Optimizer o) {
  switch (o) {
    case Optimizer::sgd: return "sgd";
    case Optimizer::momentum: return "momentum";
    case Optimizer::adam: return "adam";
  }
  return "sgd";
}

std::optional<Optimizer> parse_optimizer(std::string_view s) {
  if (s == "sgd") return Optimizer::sgd;
  if (s == "momentum") return Optimizer::momentum;
  if (s == "adam") return Optimizer::adam;
  return std::nullopt;
}

void append_optimizer(const std::vector<TensorId>& gradient_of, const TrainingOptions& o,
                      TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  size_t count = g.tensors.size();
  for (size_t i = 0; i < count && i < gradient_of.size(); ++i) {
    if (g.tensors[i].kind != TensorKind::parameter || gradient_of[i] == kNoTensor) continue;
    auto param = static_cast<TensorId>(i);
    double n = static_cast<double>(element_count(g.tensors[i].shape));
    // State tensors take the parameter's name, dtype and shape (copied: add_tensor may reallocate).
    auto state = [&](const char* suffix) {
      const Tensor& p = g.tensors[i];
      return g.add_tensor(p.name + suffix, TensorKind::optimizer_state, p.dtype, Shape(p.shape));
    };
    switch (o.optimizer) {
      case Optimizer::sgd:
        add_step(g, "SGD", Phase::optimizer, "", {param, gradient_of[i]}, {param}, 2 * n);
        break;
      case Optimizer::momentum: {
        TensorId v = state("/momentum");
        add_step(g, "SGDMomentum", Phase::optimizer, "", {param, gradient_of[i], v}, {param, v}, 4 * n);
        break;
      }
      case Optimizer::adam: {
        TensorId m1 = state("/adam_m");
        TensorId m2 = state("/adam_v");
        add_step(g, "Adam", Phase::optimizer, "", {param, gradient_of[i], m1, m2},
                 {param, m1, m2}, 16 * n);
        break;
      }
    }
  }
}

}  // namespace autovm::training
