// Contract: the order every plan's actions are kept in, and one normalisation every plan gets.
//
//   order   by after_step (issue), then ready_before_step (deadline), then, for recomputes,
//           source_step (a chain runs in dependency order: forward steps in step order), then
//           tensor, then kind: a function of the set of actions, so plans are deterministic.
//
// A recompute reads the inputs of its source step where it runs, just before its
// ready_before_step t: a use of each at t (rule 3 of docs/execution-model.md), so no transfer
// of one may be in flight there. keep_transfers_off_recompute_reads makes every transfer keep
// clear of those reads:
//
//   prefetch  whose [after_step + 1, ready_before_step - 1] holds such a t: due before the
//             first of them (step t then waits for it, as the runtime does before running the
//             recompute);
//   evict     likewise: issued after the last of them.
//
// Residency is unchanged (a prefetched tensor counts from after_step + 1, an evicted one
// through ready_before_step - 1), so the budget still holds. Then it sorts the actions.
// plan_swaps and every refinement pass (plan/passes/) apply it to each plan they make or
// simulate.
#pragma once

#include <utility>
#include <vector>

#include "plan/plan.h"

namespace autovm {

inline bool is_transfer(const Action& a) {
  return a.kind == ActionKind::evict || a.kind == ActionKind::prefetch;
}

void sort_actions(std::vector<Action>& actions);

// (tensor, step) for each step where a recompute reads the tensor (rule 3), sorted, once each.
std::vector<std::pair<TensorId, StepIndex>> recompute_reads(const TrainingGraph& graph,
                                                            const std::vector<Action>& actions);

void keep_transfers_off_recompute_reads(const TrainingGraph& graph, std::vector<Action>& actions);

}  // namespace autovm
