// Pass: the optimizer. After backward, one in-place update step per parameter that received a
// gradient, in parameter order. State tensors: momentum keeps a velocity, Adam its first and
// second moments; all live across training steps.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

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
  // fp16 autocast trains with torch.cuda.amp.GradScaler: scaler.unscale_ (or step) checks every
  // gradient for inf/NaN and unscales it in place, one foreach kernel over all of them
  // (_amp_foreach_non_finite_check_and_unscale_), before the optimizer; scaler.update() then
  // adjusts the scale from found_inf.
  TensorId scale = kNoTensor, found_inf = kNoTensor;
  if (o.autocast == Autocast::fp16) {
    std::vector<TensorId> grads;
    double elements = 0;
    for (size_t i = 0; i < count && i < gradient_of.size(); ++i) {
      if (g.tensors[i].kind != TensorKind::parameter || gradient_of[i] == kNoTensor) continue;
      grads.push_back(gradient_of[i]);
      elements += static_cast<double>(element_count(g.tensor(gradient_of[i]).shape));
    }
    scale = g.add_tensor("grad_scaler/scale", TensorKind::buffer, DType::f32, Shape{1});
    found_inf = g.add_tensor("grad_scaler/found_inf", TensorKind::activation, DType::f32, Shape{1});
    std::vector<TensorId> inputs = grads, outputs = grads;
    inputs.push_back(scale);
    outputs.push_back(found_inf);
    add_step(g, "GradScalerUnscale", Phase::optimizer, "", std::move(inputs), std::move(outputs), 2 * elements);
  }
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
  if (scale != kNoTensor) add_step(g, "GradScalerUpdate", Phase::optimizer, "", {scale, found_inf}, {scale}, 4);
}

// DDP's Reducer (torch/csrc/distributed/c10d/reducer.cpp): after the first iteration it
// rebuilds its buckets in the order gradients became ready and fills them as
// compute_bucket_assignment_by_size does: per dtype, a gradient joins the open bucket, and the
// bucket closes once it holds at least its limit (the first limit, then the cap for every later
// one). Each bucket is one flat tensor for the whole of training. Ready order here: the backward
// step that last writes the gradient; parameters whose gradients one step writes in parameter
// order, last first (bias before weight).
void append_gradient_buckets(const std::vector<TensorId>& gradient_of, const DataParallelOptions& o,
                             TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  ts.data_parallel = o;
  std::vector<StepIndex> written(g.tensors.size(), -1);
  for (const Step& s : g.steps)
    if (s.phase == Phase::backward)
      for (TensorId t : s.outputs) written[static_cast<size_t>(t)] = s.id;
  std::vector<std::pair<StepIndex, TensorId>> ready;  // (step, parameter)
  for (size_t i = 0; i < gradient_of.size() && i < g.tensors.size(); ++i) {
    if (g.tensors[i].kind != TensorKind::parameter || gradient_of[i] == kNoTensor) continue;
    ready.push_back({written[static_cast<size_t>(gradient_of[i])], static_cast<TensorId>(i)});
  }
  std::stable_sort(ready.begin(), ready.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  struct Open {
    int64_t elements = 0;
    int64_t bytes = 0;
    int limit = 0;  // 0: first_bucket_bytes, 1: bucket_cap_bytes
  };
  std::map<DType, Open> open;
  std::vector<std::pair<DType, int64_t>> closed;  // (dtype, elements), in closing order
  for (const auto& [step, param] : ready) {
    const Tensor& grad = g.tensor(gradient_of[static_cast<size_t>(param)]);
    Open& b = open[grad.dtype];
    b.elements += element_count(grad.shape);
    b.bytes += grad.bytes;
    if (b.bytes >= (b.limit == 0 ? o.first_bucket_bytes : o.bucket_cap_bytes)) {
      closed.push_back({grad.dtype, b.elements});
      b = Open{0, 0, 1};
    }
  }
  for (const auto& [dtype, b] : open)
    if (b.elements > 0) closed.push_back({dtype, b.elements});
  for (const auto& [dtype, elements] : closed) {
    TensorId t = g.add_tensor(fmt::format("ddp_bucket.{}", ts.gradient_buckets.size()),
                              TensorKind::buffer, dtype, Shape{elements});
    ts.gradient_buckets.push_back(t);
  }
}

}  // namespace autovm::training
