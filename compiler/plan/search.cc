// The search for the fastest plan under a budget (search.h).
#include "plan/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "plan/action_order.h"
#include "plan/ban_search.h"
#include "plan/baselines.h"
#include "plan/gap_split.h"
#include "plan/passes/advance_evictions.h"
#include "plan/passes/delay_transfers.h"
#include "plan/passes/drop_unread_regenerations.h"
#include "plan/passes/postpone_for_evictions.h"
#include "plan/passes/regenerate_moved.h"
#include "util/error.h"
#include "util/parallel.h"

namespace autovm {
namespace {

// The strategies of the table (search.h), each with and without the checkpoint base, each
// plan with recomputation twice: chain temporaries counted in the moment before their step,
// as the execution model has it, and on top of the step (SelectionHints), which no model wins
// with everywhere.
std::vector<SwapStrategy> strategies_of(const SearchProblem& p, const SearchConfig& config) {
  const TrainingGraph& g = p.graph;
  SwapOptions so;
  so.budget_bytes = p.budget_bytes;
  so.allow_recompute = p.allow_recompute;
  so.recompute_ops = p.recompute_ops;
  so.movable = p.movable;
  std::vector<SwapStrategy> strategies;
  auto attempt = [&](const std::vector<Action>& base, bool recompute) {
    SwapOptions with = so;
    with.allow_recompute = recompute;
    strategies.push_back({with, {}, base});
    if (!recompute) return;
    SelectionHints beside;
    beside.temporaries_beside_step = true;
    strategies.push_back({with, beside, base});
  };
  // Checkpointing's segments, as base actions, only where the options allow every one.
  std::vector<Action> checkpoint;
  bool with_checkpoint = false;
  if (p.allow_recompute) {
    checkpoint = baseline_checkpoint(g, p.life).actions;
    with_checkpoint = std::all_of(checkpoint.begin(), checkpoint.end(), [&](const Action& a) {
      return so.movable.has(g.tensor(a.tensor).kind) &&
             (a.kind != ActionKind::recompute || may_rerun(g.step(a.source_step), so.recompute_ops));
    });
  }
  for (const SelectionStrategy& row : config.strategies) {
    if (row.small_graphs_only && g.step_count() > config.small_graph_steps) continue;
    so.order = row.order;
    so.link_weight = row.link_weight;
    if (!p.allow_recompute || row.also_move_only) attempt({}, false);
    if (p.allow_recompute) attempt({}, true);
    if (with_checkpoint) attempt(checkpoint, true);
  }
  return strategies;
}

// The passes of search.h on one candidate, planned under `life`.
void refine(const SearchProblem& p, const std::vector<Lifetime>& life, const SearchConfig& config,
            std::vector<Action>& c) {
  const TrainingGraph& g = p.graph;
  const std::vector<double>& compute = p.compute_us;
  // Each simulation costs about steps + actions: bound the pass's work.
  int64_t size = g.step_count() + int64_t(c.size());
  int sims = int(std::min<int64_t>(config.pass_simulations, config.pass_work / std::max<int64_t>(size, 1)));
  delay_transfers(g, compute, p.mechanism, p.device, c, sims);
  double t = postpone_for_evictions(g, life, compute, p.mechanism, p.device, p.budget_bytes, c, sims);
  // regenerate_moved, then the two passes again on what it changed; then once more with
  // chains at up to earlier_steps steps before a prefetch's deadline, kept when faster.
  if (p.allow_recompute) {
    auto regenerate = [&](std::vector<Action>& a, StepIndex earlier) {
      return regenerate_moved(g, life, compute, p.mechanism, p.device, p.budget_bytes, p.movable,
                              p.recompute_ops, a, sims, earlier);
    };
    auto settle = [&](std::vector<Action>& a) {
      delay_transfers(g, compute, p.mechanism, p.device, a, sims);
      return postpone_for_evictions(g, life, compute, p.mechanism, p.device, p.budget_bytes, a, sims);
    };
    if (regenerate(c, 0) < t) t = settle(c);
    std::vector<Action> earlier = c;
    if (regenerate(earlier, config.earlier_steps) < t && settle(earlier) < t) c = std::move(earlier);
  }
  // Last, evictions issued as early as their queue's order allows: delay_transfers and
  // postpone_for_evictions leave some later than they need.
  advance_evictions(g, life, compute, p.mechanism, p.device, c, sims);
}

}  // namespace

SearchResult search_plan(const SearchProblem& p, const std::function<double()>& bound_us,
                         PassTimer& timer, const SearchConfig& config) {
  const TrainingGraph& g = p.graph;
  const Mechanism& mech = p.mechanism;
  const DeviceProfile& device = p.device;
  const bool small = g.step_count() <= config.small_graph_steps;
  std::vector<SwapStrategy> strategies = strategies_of(p, config);
  // Each strategy's plan, or the infeasible error that stopped it (pinned inputs can leave a
  // step nothing to move); the candidates keep the strategies' order.
  std::vector<std::vector<Action>> plans(strategies.size());
  std::vector<std::optional<Error>> infeasible(strategies.size());
  for_each_index(strategies.size(), planning_threads(), [&](size_t i) {
    try {
      plans[i] = plan_swaps(g, p.life, p.compute_us, mech, strategies[i].options,
                            strategies[i].base, strategies[i].hints);
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::infeasible) throw;
      infeasible[i] = e;
    }
  });
  std::vector<std::vector<Action>> candidates;
  std::vector<SwapStrategy> strategy_of;  // of each candidate, for the ban search below
  std::optional<Error> failure;
  for (size_t i = 0; i < strategies.size(); ++i) {
    if (infeasible[i]) {
      if (!failure) failure = infeasible[i];
      continue;
    }
    candidates.push_back(std::move(plans[i]));
    strategy_of.push_back(std::move(strategies[i]));
  }
  if (candidates.empty()) throw *failure;
  timer.done("  swap candidates");
  if (small) {
    ban_search(g, p.life, p.compute_us, mech, device, candidates, strategy_of, config.ban_plans);
    timer.done("  ban search");
  }
  // The lifetimes each candidate was planned with: the true ones, or a gap split's.
  std::vector<const std::vector<Lifetime>*> life_of(candidates.size(), &p.life);
  double fastest = std::numeric_limits<double>::infinity();  // simulated, when it was
  if (g.step_count() <= config.simulated_steps && candidates.size() > 1) {
    std::vector<std::pair<double, size_t>> times;
    for (size_t i = 0; i < candidates.size(); ++i)
      times.emplace_back(simulate(g, candidates[i], p.compute_us, mech, device).step_time_us, i);
    std::stable_sort(times.begin(), times.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    // The passes reorder the candidates: more than the fastest go on to them.
    std::vector<std::vector<Action>> top;
    for (size_t k = 0; k < config.top && k < times.size(); ++k)
      top.push_back(std::move(candidates[times[k].second]));
    candidates.swap(top);
    life_of.resize(candidates.size());
    fastest = times.front().first;
  }
  // Gap splits: the plan each level of the search kept joins the candidates with the lifetimes
  // it was planned with (the passes use them). The narrow search's plans stay candidates beside
  // the wide one's, so that no plan is slower than without it: the landscape is not smooth,
  // and a wider level can keep a split the passes do less with.
  std::vector<SplitPlan> split_plans;
  bool split = p.allow_recompute && small;
  if (p.allow_recompute && !split && g.step_count() <= config.simulated_steps) {
    if (std::isinf(fastest))  // one candidate: not simulated above
      fastest = simulate(g, candidates.front(), p.compute_us, mech, device).step_time_us;
    split = fastest > config.split_gate * bound_us();
  }
  if (split) {
    SwapOptions with;
    with.budget_bytes = p.budget_bytes;
    with.movable = p.movable;
    with.recompute_ops = p.recompute_ops;
    std::vector<SplitSearch> searches(1);
    if (!small) {
      searches[0].max_tensors = 1;
      searches[0].coarse = config.split_coarse;
      searches[0].levels = 1;
      if (g.step_count() <= config.wide_split_steps) {
        SplitSearch wide;
        wide.max_tensors = config.wide_split_tensors;
        wide.coarse = config.split_coarse;
        wide.levels = config.wide_split_levels;
        searches.push_back(wide);
      }
    }
    // Both ways of counting chain temporaries (SelectionHints::temporaries_beside_step).
    for (bool beside : {false, true}) {
      SelectionHints hints;
      hints.temporaries_beside_step = beside;
      const size_t first = split_plans.size();  // this way of counting's plans start here
      for (const SplitSearch& search : searches)
        for (SplitPlan& sp : search_gap_splits(g, p.life, p.compute_us, mech, device, with, hints, search))
          if (std::none_of(split_plans.begin() + std::ptrdiff_t(first), split_plans.end(),
                           [&](const SplitPlan& kept) { return kept.splits == sp.splits; }))
            split_plans.push_back(std::move(sp));
    }
    for (SplitPlan& sp : split_plans) {
      candidates.push_back(std::move(sp.actions));
      life_of.push_back(&sp.life);
    }
    timer.done("  gap splits");
  }
  // A split plan's regeneration at its split step may be read by nothing: dropped before the
  // passes, so that they may use the room, and the candidate judged on the true lifetimes from
  // there (the plan is valid under them: only a split use is gone).
  for (size_t i = 0; i < candidates.size(); ++i)
    if (life_of[i] != &p.life && drop_unread_regenerations(g, p.life, candidates[i]) > 0)
      life_of[i] = &p.life;
  // The passes, on each candidate at once (each changes its own candidate only).
  if (g.step_count() <= config.simulated_steps)
    for_each_index(candidates.size(), planning_threads(),
                   [&](size_t i) { refine(p, *life_of[i], config, candidates[i]); });
  timer.done("  passes");
  SearchResult result;
  double best = 0;
  for (auto& c : candidates) {
    keep_transfers_off_recompute_reads(g, c);  // already so, unless a pass left it
    SimResult r = simulate(g, c, p.compute_us, mech, device);
    if (result.actions.empty() || r.step_time_us < best) {
      best = r.step_time_us;
      result.actions = std::move(c);
      result.sim = std::move(r);
    }
  }
  return result;
}

}  // namespace autovm
