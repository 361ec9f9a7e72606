#include "plan/gap_split.h"

#include <algorithm>

namespace autovm {

std::vector<GapSplit> gap_splits(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                 const std::vector<int64_t>& unavoidable, int64_t budget,
                                 MovableKinds movable, size_t max_tensors, size_t max_steps) {
  struct Candidate {
    TensorId tensor;
    StepIndex after, before;  // the gap (after, before), both ends uses
  };
  std::vector<Candidate> found;
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[size_t(t.id)];
    if (t.kind != TensorKind::activation || !movable.has(t.kind) || l.persistent ||
        l.uses.size() < 2)
      continue;
    const Step& producer = g.step(l.first);
    if (producer.phase != Phase::forward || producer.op == "Dropout" ||
        std::find(producer.inputs.begin(), producer.inputs.end(), t.id) != producer.inputs.end())
      continue;
    for (size_t k = 1; k < l.uses.size(); ++k) {
      StepIndex a = l.uses[k - 1], b = l.uses[k];
      if (g.step(a).phase == Phase::forward && g.step(b).phase == Phase::backward) {
        found.push_back({t.id, a, b});
        break;
      }
    }
  }
  std::stable_sort(found.begin(), found.end(), [&](const Candidate& x, const Candidate& y) {
    return g.tensor(x.tensor).bytes > g.tensor(y.tensor).bytes;
  });
  if (found.size() > max_tensors) found.resize(max_tensors);
  std::sort(found.begin(), found.end(),
            [](const Candidate& x, const Candidate& y) { return x.tensor < y.tensor; });
  std::vector<GapSplit> splits;
  for (const Candidate& c : found) {
    int64_t need = g.tensor(c.tensor).bytes;
    for (TensorId in : g.step(life[size_t(c.tensor)].first).inputs) need += g.tensor(in).bytes;
    std::vector<StepIndex> fit;
    for (StepIndex t = c.after + 1; t < c.before; ++t)
      if (g.step(t).phase == Phase::backward && unavoidable[size_t(t)] + need <= budget)
        fit.push_back(t);
    if (fit.empty() || max_steps == 0) continue;
    size_t count = std::min(max_steps, fit.size());
    for (size_t i = 0; i < count; ++i) {
      // Evenly spread, the last feasible step always among them.
      size_t idx = count == 1 ? fit.size() - 1 : (fit.size() - 1) * i / (count - 1);
      if (splits.empty() || splits.back().tensor != c.tensor || splits.back().at != fit[idx])
        splits.push_back({c.tensor, fit[idx]});
    }
  }
  return splits;
}

std::vector<Lifetime> split_at(std::vector<Lifetime> life, const GapSplit& split) {
  std::vector<StepIndex>& uses = life[size_t(split.tensor)].uses;
  auto at = std::lower_bound(uses.begin(), uses.end(), split.at);
  if (at == uses.end() || *at != split.at) uses.insert(at, split.at);
  return life;
}

}  // namespace autovm
