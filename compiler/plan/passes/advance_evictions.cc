// The advance_evictions pass (passes/advance_evictions.h).
#include "plan/passes/advance_evictions.h"

#include <algorithm>
#include <set>

#include "plan/action_order.h"
#include "plan/passes/pass_support.h"
#include "plan/simulator.h"

namespace autovm {

double advance_evictions(const TrainingGraph& g, const std::vector<Lifetime>& life,
                         const std::vector<double>& compute_us, const Mechanism& mech,
                         const DeviceProfile& device, std::vector<Action>& actions,
                         int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  // Recompute reads do not change with after_steps: worked out once.
  const std::vector<std::pair<TensorId, StepIndex>> reads = recompute_reads(g, actions);
  // The earliest after_step eviction `e` may have (rule 3): its tensor's last use, read by a
  // recompute or arrival before its deadline, and its first step.
  auto earliest = [&](size_t e) {
    const Action& ev = actions[e];
    const Lifetime& l = life[size_t(ev.tensor)];
    StepIndex floor = l.first;
    for (StepIndex u : l.uses)
      if (u < ev.ready_before_step) floor = std::max(floor, u);
    auto read = std::lower_bound(reads.begin(), reads.end(),
                                 std::make_pair(ev.tensor, ev.ready_before_step));
    if (read != reads.begin() && std::prev(read)->first == ev.tensor)  // its last read before
      floor = std::max(floor, std::prev(read)->second);
    for (const Action& a : actions)
      if (a.tensor == ev.tensor && a.ready_before_step < ev.ready_before_step &&
          (a.kind == ActionKind::prefetch || a.kind == ActionKind::recompute))
        floor = std::max(floor, a.ready_before_step);
    return floor;
  };
  std::set<std::pair<TensorId, StepIndex>> tried;  // (tensor, ready_before_step) of evictions
  bool improved = true;
  while (improved && left > 0) {
    improved = false;
    // The transfers in the order the queues run them.
    std::vector<size_t> order;
    for (size_t i = 0; i < actions.size(); ++i)
      if (is_transfer(actions[i])) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sim.issue_us[a] < sim.issue_us[b]; });
    for (size_t k = 0; k < order.size() && left > 0 && !improved; ++k) {
      const size_t e = order[k];
      const Action& ev = actions[e];
      if (ev.kind != ActionKind::evict || !tried.insert({ev.tensor, ev.ready_before_step}).second)
        continue;
      StepIndex to = earliest(e);  // and no earlier than the transfer before it on its queue
      for (size_t j = k; j-- > 0;)
        if (same_copy_queue(mech, actions[order[j]], ev)) {
          to = std::max(to, actions[order[j]].after_step);
          break;
        }
      if (to >= ev.after_step) continue;
      std::vector<Action> trial = actions;
      trial[e].after_step = to;
      improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
    }
    if (improved) tried.clear();
  }
  return sim.step_time_us;
}

}  // namespace autovm
