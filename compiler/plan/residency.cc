// Residency under actions (residency.h; docs/execution-model.md, "Residency").
#include "plan/residency.h"

#include <algorithm>

namespace autovm {

std::vector<int64_t> step_allocations(const TrainingGraph& g, const std::vector<Lifetime>& life) {
  std::vector<int64_t> out(static_cast<size_t>(g.step_count()), 0);
  for (const Step& s : g.steps) {
    int64_t& bytes = out[static_cast<size_t>(s.id)];
    for (auto it = s.outputs.begin(); it != s.outputs.end(); ++it) {
      const TensorId o = *it;
      const Lifetime& l = life[static_cast<size_t>(o)];
      if (l.persistent || l.first != s.id || std::find(s.outputs.begin(), it, o) != it) continue;
      if (std::find(s.inputs.begin(), s.inputs.end(), o) != s.inputs.end()) continue;
      bytes += g.tensor(o).bytes;
    }
    if (s.workspace != kNoTensor) bytes += std::max<int64_t>(0, g.tensor(s.workspace).bytes - s.reserve_bytes);
  }
  return out;
}

std::vector<int64_t> resident_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<Action>& actions) {
  return resident_bytes(g, life, actions, step_allocations(g, life));
}

std::vector<int64_t> resident_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<Action>& actions,
                                    const std::vector<int64_t>& allocated) {
  const StepIndex n = g.step_count();
  std::vector<int64_t> delta(static_cast<size_t>(n) + 1, 0);
  auto add = [&](StepIndex lo, StepIndex hi, int64_t bytes) {  // [lo, hi], inclusive
    if (lo > hi) return;
    delta[static_cast<size_t>(lo)] += bytes;
    delta[static_cast<size_t>(hi) + 1] -= bytes;
  };
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    add(l.first, l.last, t.bytes);
  }

  // Residency changes of each tensor: the first step it is off (evict, discard) or on again
  // (prefetch, recompute); grouped by tensor (a counting sort: first_change[x] is where x's
  // begin), each group then in step order, off before on at one step.
  struct Change {
    StepIndex at;
    bool on;
  };
  auto change_of = [](const Action& a) -> Change {
    switch (a.kind) {
      case ActionKind::evict: return {a.ready_before_step, false};
      case ActionKind::discard: return {a.after_step + 1, false};
      case ActionKind::prefetch: return {a.after_step + 1, true};
      default: return {a.ready_before_step, true};  // recompute
    }
  };
  auto is_temporary = [&](const Action& a) { return is_chain_temporary(a, life); };
  std::vector<uint32_t> first_change(g.tensors.size() + 1, 0);
  std::vector<int64_t> temporaries(static_cast<size_t>(n) + 1, 0);
  for (const Action& a : actions) {
    if (is_temporary(a)) {  // a chain temporary: there in the moment before ready_before_step
      temporaries[static_cast<size_t>(a.ready_before_step)] += g.tensor(a.tensor).bytes;
      continue;
    }
    if (changes_residency(a.kind)) ++first_change[static_cast<size_t>(a.tensor) + 1];
  }
  for (size_t x = 1; x < first_change.size(); ++x) first_change[x] += first_change[x - 1];
  std::vector<Change> changes(first_change.back());
  std::vector<uint32_t> next(first_change.begin(), first_change.end() - 1);
  for (const Action& a : actions)
    if (changes_residency(a.kind) && !is_temporary(a))
      changes[next[static_cast<size_t>(a.tensor)]++] = change_of(a);
  for (size_t x = 0; x + 1 < first_change.size(); ++x) {
    if (first_change[x] == first_change[x + 1]) continue;
    auto begin = changes.begin() + first_change[x], end = changes.begin() + first_change[x + 1];
    std::sort(begin, end, [](const Change& a, const Change& b) {
      return a.at != b.at ? a.at < b.at : (!a.on && b.on);
    });
    const Lifetime& l = life[x];
    const int64_t bytes = g.tensors[x].bytes;
    // A tensor whose first change brings it on starts off the GPU (a persistent tensor kept on
    // the host between training steps).
    bool on = !begin->on;
    StepIndex off_from = l.first;
    for (auto ch = begin; ch != end; ++ch) {
      if (!ch->on && on) {
        off_from = ch->at;
        on = false;
      } else if (ch->on && !on) {
        add(std::max(off_from, l.first), std::min(ch->at - 1, l.last), -bytes);
        on = true;
      }
    }
    if (!on) add(std::max(off_from, l.first), l.last, -bytes);
  }

  // The moment before step s holds its temporaries, not what s allocates as it starts.
  for (StepIndex s = 0; s < n; ++s) {
    const int64_t beyond = moment_before_excess(temporaries[static_cast<size_t>(s)],
                                                allocated[static_cast<size_t>(s)]);
    if (beyond > 0) add(s, s, beyond);
  }
  std::vector<int64_t> resident(static_cast<size_t>(n), 0);
  int64_t running = 0;
  for (size_t s = 0; s < resident.size(); ++s) resident[s] = running += delta[s];
  return resident;
}

const Step* rerunnable_producer(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                const RecomputeOps& ops, TensorId x) {
  const Lifetime& l = life[size_t(x)];
  const TensorKind kind = g.tensor(x).kind;
  if (l.persistent || kind == TensorKind::input || kind == TensorKind::label) return nullptr;
  const Step& p = g.step(l.first);
  if (!may_rerun(p, ops)) return nullptr;
  if (std::find(p.outputs.begin(), p.outputs.end(), x) == p.outputs.end()) return nullptr;
  if (std::find(p.inputs.begin(), p.inputs.end(), x) != p.inputs.end()) return nullptr;
  return &p;
}

TensorResidency::TensorResidency(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                 const std::vector<Action>& actions)
    : life_(life), actions_(actions), of_(g.tensors.size()) {
  for (size_t i = 0; i < actions.size(); ++i) of_[size_t(actions[i].tensor)].push_back(i);
}

bool TensorResidency::on(TensorId y, StepIndex t) const {
  const Lifetime& l = life_[size_t(y)];
  std::vector<std::pair<StepIndex, bool>> changes;  // (step, on)
  for (size_t i : of_[size_t(y)]) {
    const Action& a = actions_[i];
    if (is_chain_temporary(a, life_)) {
      if (a.ready_before_step == t) return true;  // a chain temporary at t
      continue;
    }
    switch (a.kind) {
      case ActionKind::evict: changes.push_back({a.ready_before_step, false}); break;
      case ActionKind::discard: changes.push_back({a.after_step + 1, false}); break;
      case ActionKind::prefetch: changes.push_back({a.after_step + 1, true}); break;
      case ActionKind::recompute: changes.push_back({a.ready_before_step, true}); break;
      case ActionKind::advise:
      case ActionKind::read_remote: break;
    }
  }
  if (!l.persistent && (t < l.first || t > l.last)) return false;
  if (changes.empty()) return true;
  std::stable_sort(changes.begin(), changes.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : (!a.second && b.second);
  });
  // A tensor whose first change brings it on starts off the GPU (kept on the host between
  // training steps).
  bool is_on = !changes.front().second;
  for (const auto& [at, turns_on] : changes) {
    if (at > t) break;
    is_on = turns_on;
  }
  return is_on;
}

bool TensorResidency::temporary_at(TensorId y, StepIndex t) const {
  for (size_t i : of_[size_t(y)]) {
    const Action& a = actions_[i];
    if (is_chain_temporary(a, life_) && a.ready_before_step == t) return true;
  }
  return false;
}

}  // namespace autovm
