#include "plan/gap_split.h"

#include <algorithm>
#include <functional>
#include <future>
#include <limits>
#include <map>

#include "plan/gaps.h"
#include "plan/simulator.h"
#include "util/error.h"

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
    if (fit.size() <= max_steps) {
      for (StepIndex t : fit) splits.push_back({c.tensor, t});
      continue;
    }
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

namespace {

// One split of `life` planned with `options`, simulated (step_time_us infinite when the
// split adds no use or the selection cannot finish).
SplitPlan plan_split(const TrainingGraph& g, const std::vector<Lifetime>& life,
                     const std::vector<double>& compute_us, const Mechanism& mech,
                     const DeviceProfile& device, const SwapOptions& options,
                     const GapSplit& split) {
  SplitPlan p;
  p.step_time_us = std::numeric_limits<double>::infinity();
  std::vector<Lifetime> split_life = split_at(life, split);
  if (split_life[size_t(split.tensor)].uses == life[size_t(split.tensor)].uses) return p;
  try {
    p.actions = plan_swaps(g, split_life, compute_us, mech, options);
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
  threads = std::max<size_t>(1, std::min(threads, splits.size()));
  auto work = [&](size_t first) {
    for (size_t i = first; i < splits.size(); i += threads) out[i] = one(splits[i]);
  };
  std::vector<std::future<void>> others;
  for (size_t w = 1; w < threads; ++w) others.push_back(std::async(std::launch::async, work, w));
  work(0);
  for (auto& f : others) f.get();  // rethrows a worker's exception
  return out;
}

}  // namespace

std::vector<SplitPlan> search_gap_splits(
    const TrainingGraph& g, const std::vector<Lifetime>& life,
    const std::vector<double>& compute_us, const Mechanism& mech, const DeviceProfile& device,
    const SwapOptions& options, const SplitSearch& search) {
  const std::vector<int64_t> unavoidable = unavoidable_bytes(g, life, options.movable);
  const size_t stride = std::max<size_t>(1, search.stride);
  std::vector<SplitPlan> kept;
  SplitPlan current;
  current.life = life;
  current.step_time_us = std::numeric_limits<double>::infinity();
  for (size_t level = 0; level < search.levels; ++level) {
    auto one = [&](const GapSplit& split) {
      return plan_split(g, current.life, compute_us, mech, device, options, split);
    };
    std::map<TensorId, std::vector<StepIndex>> steps;  // each tensor's feasible split steps
    for (const GapSplit& s : gap_splits(g, current.life, unavoidable, options.budget_bytes,
                                        options.movable, search.max_tensors,
                                        std::numeric_limits<size_t>::max()))
      steps[s.tensor].push_back(s.at);
    // Every stride-th step of each tensor (its last too), then those within a stride of the
    // tensor's fastest.
    std::vector<GapSplit> coarse;
    for (const auto& [tensor, at] : steps) {
      for (size_t i = 0; i < at.size(); i += stride) coarse.push_back({tensor, at[i]});
      if ((at.size() - 1) % stride != 0) coarse.push_back({tensor, at.back()});
    }
    std::vector<SplitPlan> tried = plan_splits(coarse, search.threads, one);
    std::vector<GapSplit> fine;
    for (const auto& [tensor, at] : steps) {
      StepIndex centre = -1;
      double fastest = std::numeric_limits<double>::infinity();
      for (size_t i = 0; i < coarse.size(); ++i)
        if (coarse[i].tensor == tensor && tried[i].step_time_us < fastest) {
          fastest = tried[i].step_time_us;
          centre = coarse[i].at;
        }
      if (centre < 0) continue;
      size_t c = size_t(std::find(at.begin(), at.end(), centre) - at.begin());
      for (size_t i = c >= stride ? c - stride + 1 : 0; i < at.size() && i < c + stride; ++i)
        if (i % stride != 0 && i != at.size() - 1) fine.push_back({tensor, at[i]});
    }
    std::vector<SplitPlan> refined = plan_splits(fine, search.threads, one);
    tried.insert(tried.end(), std::make_move_iterator(refined.begin()),
                 std::make_move_iterator(refined.end()));
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
