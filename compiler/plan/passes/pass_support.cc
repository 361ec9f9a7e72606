// What the refinement passes share (pass_support.h).
#include "plan/passes/pass_support.h"

#include <algorithm>

#include "plan/action_order.h"

namespace autovm {

// Sorts `trial` and simulates it (one of `left` simulations); when it is faster than `sim`,
// it replaces `actions` and its simulation `sim`. Returns whether it did.
bool keep_if_faster(const TrainingGraph& g, const std::vector<double>& compute_us,
                    const Mechanism& mech, const DeviceProfile& device, std::vector<Action>& trial,
                    std::vector<Action>& actions, SimResult& sim, int& left) {
  keep_transfers_off_recompute_reads(g, trial);
  SimResult r = simulate(g, trial, compute_us, mech, device);
  --left;
  if (r.step_time_us >= sim.step_time_us) return false;
  actions.swap(trial);
  sim = std::move(r);
  return true;
}

// The latest after_step prefetch `j` may be given: before its deadline, and before every step
// it now keeps its tensor resident for where a recompute reads that tensor (rule 5 of
// docs/execution-model.md: a recompute's inputs are resident where it runs).
StepIndex latest_issue(const TrainingGraph& g, const std::vector<Action>& actions, size_t j) {
  const Action& p = actions[j];
  StepIndex limit = p.ready_before_step - 1;
  for (const Action& b : actions) {
    if (b.kind != ActionKind::recompute || b.ready_before_step <= p.after_step ||
        b.ready_before_step > limit)
      continue;
    const Step& s = g.step(b.source_step);
    if (std::find(s.inputs.begin(), s.inputs.end(), p.tensor) != s.inputs.end())
      limit = b.ready_before_step - 1;
  }
  return limit;
}

// The transfer each stalled step waited for last (its stall, its index in `actions`), worst
// stall first.
std::vector<std::pair<double, size_t>> stalled_transfers(const TrainingGraph& g,
                                                         const std::vector<Action>& actions,
                                                         const SimResult& sim) {
  const StepIndex n = g.step_count();
  std::vector<size_t> last(size_t(n) + 1, actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (!is_transfer(a)) continue;
    size_t& l = last[size_t(a.ready_before_step)];
    if (l == actions.size() || sim.ready_us[i] > sim.ready_us[l]) l = i;
  }
  std::vector<std::pair<double, size_t>> late;
  for (StepIndex st = 0; st < n; ++st)
    if (sim.stall_before_us[size_t(st)] > 0 && last[size_t(st)] < actions.size())
      late.emplace_back(sim.stall_before_us[size_t(st)], last[size_t(st)]);
  std::sort(late.begin(), late.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return late;
}

// The evict/prefetch pair of `i` (a transfer of a non-persistent tensor): {evict, prefetch}, or
// {n, n} when it has none.
std::pair<size_t, size_t> moved_pair(const std::vector<Action>& actions, const TensorResidency& res, size_t i) {
  const size_t none = actions.size();
  const Action& a = actions[i];
  size_t other = none;
  for (size_t j : res.of(a.tensor)) {
    const Action& b = actions[j];
    if (a.kind == ActionKind::evict) {
      if (b.kind == ActionKind::prefetch && b.after_step + 1 >= a.ready_before_step &&
          (other == none || b.after_step < actions[other].after_step))
        other = j;
    } else if (b.kind == ActionKind::evict && b.ready_before_step <= a.after_step + 1 &&
               (other == none || b.ready_before_step > actions[other].ready_before_step)) {
      other = j;
    }
  }
  if (other == none) return {none, none};
  return a.kind == ActionKind::evict ? std::make_pair(i, other) : std::make_pair(other, i);
}

// Drops chain temporaries due at the given steps that no other recompute there reads any more
// (after a recompute was brought forward out of their chain).
void prune_temporaries(const TrainingGraph& g, const std::vector<Lifetime>& life,
                       const std::set<StepIndex>& steps, std::vector<Action>& actions) {
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (size_t i = 0; i < actions.size() && !dropped; ++i) {
      const Action& a = actions[i];
      if (!is_chain_temporary(a, life) || !steps.count(a.ready_before_step)) continue;
      bool read = false;
      for (const Action& b : actions)
        if (b.kind == ActionKind::recompute && b.ready_before_step == a.ready_before_step) {
          const Step& s = g.step(b.source_step);
          read |= std::find(s.inputs.begin(), s.inputs.end(), a.tensor) != s.inputs.end();
        }
      if (read) continue;
      actions.erase(actions.begin() + std::ptrdiff_t(i));
      dropped = true;
    }
  }
}

}  // namespace autovm
