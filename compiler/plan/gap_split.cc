#include "plan/gap_split.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "plan/gaps.h"
#include "plan/simulator.h"
#include "util/error.h"
#include "util/parallel.h"

namespace autovm {

std::vector<GapSplit> gap_splits(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                 const std::vector<int64_t>& unavoidable, int64_t budget,
                                 MovableKinds movable, const RecomputeOps& recompute_ops,
                                 size_t max_tensors) {
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
    if (!may_rerun(producer, recompute_ops) ||
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
    for (StepIndex t = c.after + 1; t < c.before; ++t)
      if (g.step(t).phase == Phase::backward && unavoidable[size_t(t)] + need <= budget)
        splits.push_back({c.tensor, t});
  }
  return splits;
}

std::vector<Lifetime> split_at(std::vector<Lifetime> life, const GapSplit& split) {
  std::vector<StepIndex>& uses = life[size_t(split.tensor)].uses;
  auto at = std::lower_bound(uses.begin(), uses.end(), split.at);
  if (at == uses.end() || *at != split.at) uses.insert(at, split.at);
  return life;
}

namespace {

// One split of `life` planned with `options`, simulated (step_time_us infinite when the
// selection cannot finish). gap_splits proposes steps strictly inside a gap: never a use.
SplitPlan plan_split(const TrainingGraph& g, const std::vector<Lifetime>& life,
                     const std::vector<double>& compute_us, const Mechanism& mech,
                     const DeviceProfile& device, const SwapOptions& options,
                     const SelectionHints& hints, const GapSplit& split) {
  SplitPlan p;
  p.step_time_us = std::numeric_limits<double>::infinity();
  std::vector<Lifetime> split_life = split_at(life, split);
  try {
    p.actions = plan_swaps(g, split_life, compute_us, mech, options, {}, hints);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::infeasible) throw;
    return p;
  }
  p.step_time_us = simulate(g, p.actions, compute_us, mech, device).step_time_us;
  p.splits = {split};
  p.life = std::move(split_life);
  return p;
}

// plan_split for each of `splits`, on up to `threads` threads: the same results, in order.
std::vector<SplitPlan> plan_splits(const std::vector<GapSplit>& splits, size_t threads,
                                   const std::function<SplitPlan(const GapSplit&)>& one) {
  std::vector<SplitPlan> out(splits.size());
  for_each_index(splits.size(), threads, [&](size_t i) { out[i] = one(splits[i]); });
  return out;
}

}  // namespace

std::vector<SplitPlan> search_gap_splits(
    const TrainingGraph& g, const std::vector<Lifetime>& life,
    const std::vector<double>& compute_us, const Mechanism& mech, const DeviceProfile& device,
    const SwapOptions& options, const SelectionHints& hints, const SplitSearch& search) {
  const std::vector<int64_t> unavoidable = unavoidable_bytes(g, life, options.movable);
  std::vector<SplitPlan> kept;
  SplitPlan current;
  current.life = life;
  current.step_time_us = std::numeric_limits<double>::infinity();
  for (size_t level = 0; level < search.levels; ++level) {
    auto one = [&](const GapSplit& split) {
      return plan_split(g, current.life, compute_us, mech, device, options, hints, split);
    };
    std::map<TensorId, std::vector<StepIndex>> by_tensor;  // feasible split steps
    for (const GapSplit& s : gap_splits(g, current.life, unavoidable, options.budget_bytes,
                                        options.movable, options.recompute_ops,
                                        search.max_tensors))
      by_tensor[s.tensor].push_back(s.at);
    struct Tensor {
      TensorId id;
      std::vector<StepIndex> at;
      std::vector<bool> tried;
      size_t centre = 0;
      double fastest = std::numeric_limits<double>::infinity();
    };
    std::vector<Tensor> tensors;
    for (auto& [id, at] : by_tensor) tensors.push_back({id, at, std::vector<bool>(at.size()), 0});
    std::vector<SplitPlan> tried;
    // Plans the (tensor, step index) pairs of a round together; each tensor's fastest is its
    // centre.
    auto round = [&](const std::vector<std::pair<size_t, size_t>>& picks) {
      std::vector<GapSplit> splits;
      for (auto [k, i] : picks) {
        tensors[k].tried[i] = true;
        splits.push_back({tensors[k].id, tensors[k].at[i]});
      }
      std::vector<SplitPlan> plans = plan_splits(splits, search.threads, one);
      for (size_t j = 0; j < picks.size(); ++j) {
        Tensor& t = tensors[picks[j].first];
        if (plans[j].step_time_us < t.fastest) {
          t.fastest = plans[j].step_time_us;
          t.centre = picks[j].second;
        }
      }
      tried.insert(tried.end(), std::make_move_iterator(plans.begin()),
                   std::make_move_iterator(plans.end()));
    };
    // Every stride-th step of each tensor and its last, then around its fastest at half the
    // stride, a quarter, ... down to one step.
    size_t widest = 0;
    std::vector<std::pair<size_t, size_t>> picks;
    for (size_t k = 0; k < tensors.size(); ++k) {
      const size_t n = tensors[k].at.size();
      size_t stride = search.coarse == 0 ? 1 : std::max<size_t>(1, (n + search.coarse - 1) / search.coarse);
      widest = std::max(widest, stride);
      for (size_t i = 0; i < n; i += stride) picks.push_back({k, i});
      if ((n - 1) % stride != 0) picks.push_back({k, n - 1});
    }
    round(picks);
    for (size_t half = widest / 2; half >= 1; half /= 2) {
      picks.clear();
      for (size_t k = 0; k < tensors.size(); ++k) {
        const Tensor& t = tensors[k];
        if (std::isinf(t.fastest)) continue;
        if (t.centre >= half && !t.tried[t.centre - half]) picks.push_back({k, t.centre - half});
        if (t.centre + half < t.at.size() && !t.tried[t.centre + half])
          picks.push_back({k, t.centre + half});
      }
      round(picks);
    }
    size_t best = tried.size();
    for (size_t i = 0; i < tried.size(); ++i)
      if (tried[i].step_time_us < current.step_time_us &&
          (best == tried.size() || tried[i].step_time_us < tried[best].step_time_us))
        best = i;
    if (best == tried.size()) break;  // no split beat the level before
    SplitPlan next = std::move(tried[best]);
    next.splits.insert(next.splits.begin(), current.splits.begin(), current.splits.end());
    current = next;
    kept.push_back(std::move(next));
  }
  return kept;
}

}  // namespace autovm
