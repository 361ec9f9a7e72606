// Contract: the search for the fastest plan under a budget. The greedy selection
// (swap_planner.h) is myopic and no one strategy wins on every model and budget, so the search
// plans with several, steers the greedy away from choices that stalled, splits gaps, refines
// each candidate with the passes (plan/passes/) and keeps the one the simulator finds fastest.
// docs/planner.md says why each setting of SearchConfig has its value.
//
//   strategies     SearchConfig::strategies x {no recompute, recompute, checkpoint base}
//                  x {temporaries in the moment before a step, beside it}  -> plan_swaps each
//   ban search     graphs of up to small_graph_steps steps (plan/ban_search.h)
//   top            the `top` fastest candidates (when simulated_steps allows)
//   gap splits     plan/gap_split.h: every small graph; a larger one when its fastest
//                  candidate is more than split_gate times the bound
//   passes         on each candidate: delay_transfers, postpone_for_evictions,
//                  regenerate_moved (then the two again), regenerate_moved with
//                  earlier_steps, advance_evictions
//   choice         the fastest by the simulator; ties keep the earlier candidate
//
// Every candidate is a plan_swaps plan changed only by passes that keep every rule of
// docs/execution-model.md, so the result is valid whichever wins. Deterministic: parallel work
// is chosen among in a fixed order.
#pragma once

#include <functional>
#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"
#include "plan/simulator.h"
#include "plan/swap_planner.h"
#include "util/pass_timer.h"

namespace autovm {

// One row of the strategy table: a select order and link weight.
struct SelectionStrategy {
  SelectOrder order = SelectOrder::most_over;
  double link_weight = 0.1;
  bool small_graphs_only = false;  // only on graphs of up to small_graph_steps steps
  // Also a plan that only moves when recomputation is allowed (moving alone always finds a
  // plan for a feasible budget; recomputation pins inputs, which can leave a step nothing).
  bool also_move_only = false;
};

struct SearchConfig {
  // The strategy table, in the order tried (ties between candidates keep the earlier).
  //   most_over, 0.1   the default: every graph, with a move-only plan beside it;
  //   the others       small graphs, where a plan takes well under a millisecond: which order
  //                    and link weight do best differs by model and budget.
  std::vector<SelectionStrategy> strategies = {
      {SelectOrder::most_over, 0.1, false, true}, {SelectOrder::most_over, 0.0, true, false},
      {SelectOrder::earliest, 0.1, true, false},  {SelectOrder::earliest, 0.0, true, false},
      {SelectOrder::latest, 0.1, true, false},    {SelectOrder::latest, 0.0, true, false}};
  // Graphs of up to this many steps get every strategy, the ban search and the full gap-split
  // search: on larger ones each plan costs tens of milliseconds.
  StepIndex small_graph_steps = 400;
  int ban_plans = 200;  // plan_swaps calls the ban search may make
  // The candidates are simulated, cut to the `top` fastest and refined by the passes on graphs
  // of up to simulated_steps steps; each pass gets at most pass_simulations simulations, and
  // at most pass_work / (steps + actions) of them (a simulation costs about steps + actions).
  StepIndex simulated_steps = 4000;
  size_t top = 4;
  int pass_simulations = 400;
  int64_t pass_work = 200000;
  StepIndex earlier_steps = 12;  // regenerate_moved's second run: chains this far before t
  // Gap splits on graphs larger than small_graph_steps (up to simulated_steps): only when the
  // fastest candidate is more than split_gate times the bound; about split_coarse steps of the
  // largest activation, one level; and on graphs of up to wide_split_steps steps also about
  // split_coarse steps of each of the wide_split_tensors largest, wide_split_levels levels.
  double split_gate = 1.10;
  size_t split_coarse = 6;
  StepIndex wide_split_steps = 600;
  size_t wide_split_tensors = 12;
  size_t wide_split_levels = 3;
};

struct SearchResult {
  std::vector<Action> actions;
  SimResult sim;  // the simulation of `actions`
};

// What the search plans for: the graph under its lifetimes, the budget and the options that
// bound the plan (recomputation, recompute ops, movable kinds).
struct SearchProblem {
  const TrainingGraph& graph;
  const std::vector<Lifetime>& life;
  const std::vector<double>& compute_us;
  const Mechanism& mechanism;
  const DeviceProfile& device;
  int64_t budget_bytes = 0;
  bool allow_recompute = true;
  const RecomputeOps& recompute_ops;
  MovableKinds movable;
};

// The fastest plan found. `bound_us` gives the lower bound (plan/bound.h), asked only when the
// split gate needs it (the caller may work it out beside the search). `timer` times the parts
// with AUTOVM_TIMINGS. Throws Error(infeasible) when no strategy finds a plan.
SearchResult search_plan(const SearchProblem& problem, const std::function<double()>& bound_us,
                         PassTimer& timer, const SearchConfig& config = {});

}  // namespace autovm
