#include "plan/ban_search.h"

#include <algorithm>
#include <tuple>

#include "plan/simulator.h"
#include "util/error.h"

namespace autovm {
namespace {

constexpr size_t kSuspects = 8;

bool is_transfer(const Action& a) {
  return a.kind == ActionKind::evict || a.kind == ActionKind::prefetch;
}

// The gap a transfer moves its tensor over: an evict starts it (after_step is the use before
// the gap until delay_transfers runs), a prefetch ends it (ready_before_step is the use after).
SelectionHints::Ban ban_of(const Action& a) {
  SelectionHints::Ban b;
  b.tensor = a.tensor;
  if (a.kind == ActionKind::evict) b.after = a.after_step;
  else b.before = a.ready_before_step;
  return b;
}

bool same(const SelectionHints::Ban& x, const SelectionHints::Ban& y) {
  return std::tie(x.tensor, x.after, x.before, x.move_only) ==
         std::tie(y.tensor, y.after, y.before, y.move_only);
}

// The round's suspects (ban_search.h), worst stall first.
std::vector<SelectionHints::Ban> suspects(const TrainingGraph& g, const std::vector<Action>& actions,
                                       const SimResult& sim, const Mechanism& mech) {
  const StepIndex n = g.step_count();
  std::vector<size_t> last(size_t(n) + 1, actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    if (!is_transfer(actions[i])) continue;
    size_t& l = last[size_t(actions[i].ready_before_step)];
    if (l == actions.size() || sim.ready_us[i] > sim.ready_us[l]) l = i;
  }
  std::vector<std::pair<double, StepIndex>> stalled;
  for (StepIndex s = 0; s < n; ++s)
    if (sim.stall_before_us[size_t(s)] > 0 && last[size_t(s)] < actions.size())
      stalled.emplace_back(sim.stall_before_us[size_t(s)], s);
  double end_wait = sim.step_time_us - (n > 0 ? sim.end_us[size_t(n) - 1] : 0);
  if (end_wait > 0 && last[size_t(n)] < actions.size()) stalled.emplace_back(end_wait, n);
  std::stable_sort(stalled.begin(), stalled.end(),
                   [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<SelectionHints::Ban> out;
  auto push = [&](const SelectionHints::Ban& b) {
    if (out.size() < kSuspects &&
        std::none_of(out.begin(), out.end(), [&](const auto& o) { return same(o, b); }))
      out.push_back(b);
  };
  auto add = [&](const Action& a) { push(ban_of(a)); };
  for (const auto& [stall, s] : stalled) {
    size_t l = last[size_t(s)];
    add(actions[l]);
    // A prefetch could not start earlier because the budget was full where it was issued:
    // the recompute chains that run there hold temporaries; moving their tensor instead may
    // leave room.
    // (A chain temporary has no gap there: its ban matches nothing.)
    if (actions[l].kind == ActionKind::prefetch) {
      const StepIndex k = actions[l].after_step;
      for (const Action& a : actions)
        if (a.kind == ActionKind::recompute && a.ready_before_step >= k - 1 &&
            a.ready_before_step <= k + 1)
          push({a.tensor, -2, a.ready_before_step, true});
    }
    // The transfers on its queue that were still busy when it was issued held it up.
    for (size_t j = 0; j < actions.size(); ++j) {
      const Action& a = actions[j];
      if (j == l || !is_transfer(a) || (mech.duplex && a.kind != actions[l].kind)) continue;
      if (sim.issue_us[j] <= sim.issue_us[l] && sim.ready_us[j] > sim.issue_us[l]) add(a);
    }
    if (out.size() >= kSuspects) break;
  }
  return out;
}

}  // namespace

int ban_search(const TrainingGraph& g, const std::vector<Lifetime>& life,
               const std::vector<double>& compute_us, const Mechanism& mech,
               const DeviceProfile& device, std::vector<std::vector<Action>>& candidates,
               std::vector<SwapStrategy>& strategies, int max_plans) {
  if (candidates.empty()) return 0;
  size_t best = 0;
  double best_us = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    double t = simulate(g, candidates[i], compute_us, mech, device).step_time_us;
    if (i == 0 || t < best_us) best = i, best_us = t;
  }
  std::vector<Action> best_plan = candidates[best];
  SwapStrategy best_strategy = strategies[best];
  const std::vector<SwapStrategy> tried = strategies;  // the strategies each trial plans with
  std::vector<SelectionHints::Ban> bans;
  bool found = false;
  int plans = 0;
  while (plans < max_plans) {
    SimResult sim = simulate(g, best_plan, compute_us, mech, device);
    bool improved = false;
    std::vector<Action> round_plan;
    SwapStrategy round_strategy;
    double round_us = best_us;
    // The first round tries every strategy; later ones the strategy of the best so far.
    std::vector<SwapStrategy> round_strategies;
    if (!found) round_strategies = tried;
    else round_strategies = {best_strategy};
    for (const SelectionHints::Ban& suspect : suspects(g, best_plan, sim, mech)) {
      for (const SwapStrategy& st : round_strategies) {
        if (plans >= max_plans) break;
        SwapStrategy trial = st;
        trial.hints.last_resort = bans;
        trial.hints.last_resort.push_back(suspect);
        ++plans;
        std::vector<Action> actions;
        try {
          actions = plan_swaps(g, life, compute_us, mech, trial.options, trial.base, trial.hints);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::infeasible) throw;
          continue;
        }
        double t = simulate(g, actions, compute_us, mech, device).step_time_us;
        if (t < round_us) {
          round_us = t;
          round_plan = std::move(actions);
          round_strategy = std::move(trial);
          improved = true;
        }
      }
    }
    if (!improved) break;
    best_us = round_us;
    best_plan = std::move(round_plan);
    best_strategy = std::move(round_strategy);
    bans = best_strategy.hints.last_resort;
    found = true;
  }
  if (found) {
    candidates.push_back(std::move(best_plan));
    strategies.push_back(std::move(best_strategy));
  }
  return plans;
}

}  // namespace autovm
