// Contract: the swap planner. Given the training step, its memory timeline, predicted step
// times and a transfer mechanism, it chooses actions (docs/execution-model.md) so that resident
// bytes stay within the budget at every step, stalling the compute stream as little as it can.
//
// Passes, in order (one function each in swap_planner.cc):
//   1. select   while some step s exceeds the budget, choose one gap (plan/gaps.h) that covers
//               s: a gap whose transfers fit in the compute time around it (hidden) before one
//               that does not; among hidden ones, the smallest tensor that clears s's excess,
//               else the largest. A gap whose producer is a cheap forward op (no convolution,
//               matrix product, batch norm or dropout) with its inputs resident at the next use
//               is recomputed instead of moved when that costs less time than the link would.
//               The tensor is off only over the steps of the gap that were over the budget.
//   2. widen    with the exact resident bytes, drop the base's recompute pairs the budget does
//               not need (costliest first), then issue each prefetch as early and complete each
//               eviction as late as the budget allows, so transfers get the most time; a pair
//               that no longer takes the tensor off at any step is dropped.
//   3. order    actions sorted by issue step, then deadline, then tensor: deterministic.
// Throws Error(infeasible) (gaps.h: check_budget_feasible) when no plan can meet the budget.
#pragma once

#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"

namespace autovm {

struct SwapOptions {
  int64_t budget_bytes = 0;
  bool allow_recompute = true;
};

// `base`: actions decided beforehand (e.g. a checkpointing policy's discards and recomputes).
// The planner keeps them, leaves their tensors alone, keeps the inputs of their recomputes
// resident where they run, and drops base discard/recompute pairs the budget turns out not to
// need. Returns base and new actions together.
std::vector<Action> plan_swaps(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                               const std::vector<double>& compute_us, const Mechanism& mechanism,
                               const SwapOptions& options, std::vector<Action> base = {});

}  // namespace autovm
