// Contract: widen, the pass plan_swaps runs after its greedy selection (swap_planner.h).
//
// Why: the selection takes a tensor off only over the steps that were over the budget, and
// takes some recompute pairs the finished plan does not need.
//
// Rule, with the exact resident bytes (plan/residency.h):
//   1. drop the discard/recompute pairs the budget does not need (the tensor fits over its
//      whole off interval), costliest first; never a pair whose chain made temporaries, nor
//      one that regenerates an input of another recompute;
//   2. for each evict/prefetch pair (by the prefetch's deadline), issue the prefetch as early
//      and complete the eviction as late as the budget allows, so transfers get the most
//      time; a pair that no longer takes its tensor off at any step is dropped;
//   3. an eviction that takes a non-persistent tensor off for the rest of its lifetime (a tail
//      gap, plan/gaps.h) completes as late as the budget allows.
// Resident bytes stay within the budget wherever they were.
#pragma once

#include <vector>

#include "plan/plan.h"

namespace autovm {

void widen(const TrainingGraph& graph, const std::vector<Lifetime>& life, int64_t budget,
           const std::vector<double>& compute_us, std::vector<Action>& actions);

}  // namespace autovm
