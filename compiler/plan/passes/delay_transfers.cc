// The delay_transfers pass (passes/delay_transfers.h).
#include "plan/passes/delay_transfers.h"

#include <algorithm>
#include <set>

#include "plan/action_order.h"
#include "plan/passes/pass_support.h"
#include "plan/simulator.h"

namespace autovm {

double delay_transfers(const TrainingGraph& g, const std::vector<double>& compute_us,
                       const Mechanism& mech, const DeviceProfile& device,
                       std::vector<Action>& actions, int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  std::set<std::pair<size_t, StepIndex>> tried;  // (action index, after_step) per round
  while (left > 0) {
    const std::vector<std::pair<double, size_t>> late = stalled_transfers(g, actions, sim);
    // Moves: a transfer on the same queue, issued no later and still busy when the late one
    // was issued, with a later deadline, issued instead when the late one is (or just before
    // its own deadline), so that the late one goes first.
    bool improved = false;
    for (const auto& [stall, l] : late) {
      const Action& lt = actions[l];
      for (size_t j = 0; j < actions.size() && left > 0 && !improved; ++j) {
        const Action& a = actions[j];
        if (j == l || !is_transfer(a) || !same_copy_queue(mech, a, lt) || a.after_step > lt.after_step ||
            sim.ready_us[j] <= sim.issue_us[l] || a.ready_before_step <= lt.ready_before_step)
          continue;
        StepIndex to = std::min(lt.after_step, a.kind == ActionKind::prefetch
                                                   ? latest_issue(g, actions, j)
                                                   : a.ready_before_step - 1);
        if (to <= a.after_step || !tried.insert({j, to}).second) continue;
        std::vector<Action> trial = actions;
        trial[j].after_step = to;
        improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
      }
      if (improved || left <= 0) break;
    }
    if (!improved) break;
    tried.clear();
  }
  return sim.step_time_us;
}

}  // namespace autovm
