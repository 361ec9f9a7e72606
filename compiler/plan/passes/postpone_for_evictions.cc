// The postpone_for_evictions pass (passes/postpone_for_evictions.h).
#include "plan/passes/postpone_for_evictions.h"

#include <algorithm>
#include <set>

#include "plan/action_order.h"
#include "plan/passes/pass_support.h"
#include "plan/simulator.h"
#include "plan/residency.h"

namespace autovm {

double postpone_for_evictions(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              const std::vector<double>& compute_us, const Mechanism& mech,
                              const DeviceProfile& device, int64_t budget_bytes,
                              std::vector<Action>& actions, int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  const StepIndex n = g.step_count();
  const std::vector<int64_t> allocated = step_allocations(g, life);  // for resident_bytes
  // The latest deadline evict `e` may have: before its tensor's next prefetch is issued (that
  // prefetch's after_step, so that it stays off a step at least) and never past a use (rule 3).
  auto deadline_limit = [&](size_t e) {
    const Action& ev = actions[e];
    StepIndex limit = n;
    for (const Action& a : actions)
      if (a.tensor == ev.tensor && a.kind == ActionKind::prefetch && a.after_step >= ev.ready_before_step)
        limit = std::min(limit, a.after_step);
    for (StepIndex u : life[size_t(ev.tensor)].uses)
      if (u > ev.after_step) limit = std::min(limit, u);
    return limit;
  };
  bool improved = true;
  while (improved && left > 0) {
    improved = false;
    for (const auto& [stall, l] : stalled_transfers(g, actions, sim)) {
      if (actions[l].kind != ActionKind::evict) continue;
      const StepIndex st = actions[l].ready_before_step;
      const StepIndex limit = deadline_limit(l);
      if (limit <= st) continue;
      for (size_t j = 0; j < actions.size() && left > 0 && !improved; ++j) {
        if (actions[j].kind != ActionKind::prefetch || actions[j].tensor == actions[l].tensor) continue;
        const StepIndex issue = actions[j].after_step, due = actions[j].ready_before_step;
        if (issue + 1 > st || issue + 1 >= due) continue;  // not resident at st, or cannot move
        // Issue it later (its tensor is then resident from later on: never against a rule, up
        // to a recompute that reads it), by at least enough to be off at st, then by doubling.
        const StepIndex latest = latest_issue(g, actions, j);
        for (StepIndex d = st - issue; issue + d <= latest && left > 0 && !improved; d *= 2) {
          std::vector<Action> trial = actions;
          trial[j].after_step = issue + d;
          std::vector<int64_t> resident = resident_bytes(g, life, trial, allocated);
          --left;  // as costly as a simulation: counted alike
          Action& ev = trial[l];
          while (ev.ready_before_step < limit &&
                 resident[size_t(ev.ready_before_step)] + ev.bytes <= budget_bytes)
            resident[size_t(ev.ready_before_step++)] += ev.bytes;
          if (ev.ready_before_step == st) break;  // no room at st, nor with a later issue
          if (left <= 0) break;
          improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
        }
      }
      if (improved || left <= 0) break;
    }
  }
  return sim.step_time_us;
}

}  // namespace autovm
