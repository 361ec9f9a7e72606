// The widen pass (passes/widen.h).
#include "plan/passes/widen.h"

#include <algorithm>
#include <set>

#include "plan/residency.h"

namespace autovm {
namespace {

// A discard/recompute pair the budget does not need (the tensor fits over its whole off
// interval) only costs compute: drop it, the costliest first. Pairs whose chain made
// temporaries, or that regenerate an input of another recompute, stay.
void drop_unneeded_recomputes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              int64_t budget, const std::vector<double>& compute_us,
                              std::vector<int64_t>& resident, std::vector<Action>& actions) {
  std::vector<std::vector<size_t>> discards(g.tensors.size());  // by tensor
  std::vector<std::vector<size_t>> consumers(g.tensors.size());  // recomputes reading it
  std::set<std::pair<TensorId, StepIndex>> temporaries;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.kind == ActionKind::discard) discards[size_t(a.tensor)].push_back(i);
    if (a.kind != ActionKind::recompute) continue;
    for (TensorId in : g.step(a.source_step).inputs) consumers[size_t(in)].push_back(i);
    if (is_chain_temporary(a, life)) temporaries.insert({a.tensor, a.ready_before_step});
  }
  std::vector<std::pair<size_t, size_t>> pairs;  // (discard, recompute)
  for (size_t r = 0; r < actions.size(); ++r) {
    const Action& a = actions[r];
    if (a.kind != ActionKind::recompute || is_chain_temporary(a, life)) continue;
    bool chained = false;
    for (TensorId in : g.step(a.source_step).inputs)
      chained |= temporaries.count({in, a.ready_before_step}) > 0;
    if (chained) continue;
    size_t best = actions.size();  // the last discard before it
    for (size_t d : discards[size_t(a.tensor)])
      if (actions[d].after_step < a.ready_before_step &&
          (best == actions.size() || actions[d].after_step > actions[best].after_step))
        best = d;
    if (best < actions.size()) pairs.push_back({best, r});
  }
  std::sort(pairs.begin(), pairs.end(), [&](auto a, auto b) {
    double ca = compute_us[size_t(actions[a.second].source_step)];
    double cb = compute_us[size_t(actions[b.second].source_step)];
    return ca != cb ? ca > cb : a.second < b.second;
  });
  std::vector<bool> drop(actions.size(), false);
  for (auto [d, r] : pairs) {
    bool feeds_other = false;
    for (size_t r2 : consumers[size_t(actions[r].tensor)]) feeds_other |= r2 != r && !drop[r2];
    if (feeds_other) continue;
    StepIndex lo = actions[d].after_step + 1, hi = actions[r].ready_before_step - 1;
    int64_t bytes = actions[d].bytes;
    bool fits = true;
    for (StepIndex s = lo; s <= hi && fits; ++s) fits = resident[size_t(s)] + bytes <= budget;
    if (!fits) continue;
    for (StepIndex s = lo; s <= hi; ++s) resident[size_t(s)] += bytes;
    drop[d] = drop[r] = true;
  }
  std::vector<Action> kept;
  for (size_t i = 0; i < actions.size(); ++i)
    if (!drop[i]) kept.push_back(actions[i]);
  actions.swap(kept);
}

}  // namespace

void widen(const TrainingGraph& g, const std::vector<Lifetime>& life, int64_t budget,
           const std::vector<double>& compute_us, std::vector<Action>& actions) {
  std::vector<int64_t> resident = resident_bytes(g, life, actions);
  drop_unneeded_recomputes(g, life, budget, compute_us, resident, actions);
  // Pair each non-wrap evict with its prefetch (they were emitted next to each other).
  std::vector<size_t> order;
  for (size_t i = 0; i + 1 < actions.size(); ++i)
    if (actions[i].kind == ActionKind::evict && actions[i + 1].kind == ActionKind::prefetch &&
        actions[i].tensor == actions[i + 1].tensor &&
        actions[i].after_step < actions[i + 1].ready_before_step &&
        actions[i].ready_before_step <= actions[i + 1].after_step)
      order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return actions[a + 1].ready_before_step != actions[b + 1].ready_before_step
               ? actions[a + 1].ready_before_step < actions[b + 1].ready_before_step
               : a < b;
  });
  std::vector<bool> drop(actions.size(), false);
  for (size_t i : order) {
    Action& evict = actions[i];
    Action& fetch = actions[i + 1];
    int64_t bytes = evict.bytes;
    StepIndex lo = evict.ready_before_step;  // off over [lo, hi]
    StepIndex hi = fetch.after_step;
    while (hi >= lo && resident[size_t(hi)] + bytes <= budget) resident[size_t(hi--)] += bytes;
    while (lo <= hi && resident[size_t(lo)] + bytes <= budget) resident[size_t(lo++)] += bytes;
    if (lo > hi) {
      drop[i] = drop[i + 1] = true;  // never off any more: no transfer needed
      continue;
    }
    evict.ready_before_step = lo;
    fetch.after_step = hi;
  }
  // An eviction that takes a tensor off for the rest of its lifetime (a tail gap, plan/gaps.h:
  // read remotely after it) lands as late as the budget allows.
  std::vector<StepIndex> last_back(g.tensors.size(), -1);  // [tensor] the last step it comes back at
  for (const Action& a : actions) {
    StepIndex& back = last_back[size_t(a.tensor)];
    if (a.kind == ActionKind::prefetch) back = std::max(back, a.after_step + 1);
    if (a.kind == ActionKind::recompute) back = std::max(back, a.ready_before_step);
  }
  for (size_t i = 0; i < actions.size(); ++i) {
    Action& evict = actions[i];
    const Lifetime& l = life[size_t(evict.tensor)];
    if (evict.kind != ActionKind::evict || drop[i] || l.persistent ||
        last_back[size_t(evict.tensor)] >= evict.ready_before_step)
      continue;
    StepIndex lo = evict.ready_before_step;
    while (lo <= l.last && resident[size_t(lo)] + evict.bytes <= budget) resident[size_t(lo++)] += evict.bytes;
    if (lo > l.last) drop[i] = true;
    else evict.ready_before_step = lo;
  }
  std::vector<Action> kept;
  for (size_t i = 0; i < actions.size(); ++i)
    if (!drop[i]) kept.push_back(actions[i]);
  actions.swap(kept);
}

}  // namespace autovm
