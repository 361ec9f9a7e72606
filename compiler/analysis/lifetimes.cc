#include "analysis/lifetimes.h"

#include <cassert>
#include <cstdint>

namespace autovm {

std::vector<Lifetime> compute_lifetimes(const TrainingGraph& g) {
  std::vector<Lifetime> life(g.tensors.size());
  // Each `uses` is allocated once: its size is at most the tensor's mentions in the steps.
  std::vector<uint32_t> mentions(g.tensors.size(), 0);
  for (const Step& step : g.steps) {
    for (TensorId t : step.inputs) ++mentions[static_cast<size_t>(t)];
    for (TensorId t : step.outputs) ++mentions[static_cast<size_t>(t)];
    if (step.workspace != kNoTensor) ++mentions[static_cast<size_t>(step.workspace)];
  }
  for (size_t t = 0; t < life.size(); ++t) life[t].uses.reserve(mentions[t]);
  std::vector<bool> seen(g.tensors.size(), false);
  auto touch = [&](TensorId t, StepIndex s) {
    Lifetime& l = life[static_cast<size_t>(t)];
    if (!seen[static_cast<size_t>(t)]) {
      seen[static_cast<size_t>(t)] = true;
      l.first = s;
    }
    if (l.uses.empty() || l.uses.back() != s) l.uses.push_back(s);
    l.last = s;
  };
  for (const Step& step : g.steps) {
    for (TensorId t : step.inputs) touch(t, step.id);
    for (TensorId t : step.outputs) touch(t, step.id);
    if (step.workspace != kNoTensor) touch(step.workspace, step.id);
  }
  StepIndex end = g.step_count() - 1;
  for (const Tensor& t : g.tensors) {
    Lifetime& l = life[static_cast<size_t>(t.id)];
    if (persists_across_steps(t.kind)) {
      l.first = 0;
      l.last = end < 0 ? 0 : end;
      l.persistent = true;
    } else if (t.kind == TensorKind::input || t.kind == TensorKind::label) {
      l.first = 0;
    }
    assert(l.first <= l.last);
  }
  return life;
}

}  // namespace autovm
