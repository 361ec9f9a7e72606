// Contract: gap splits, a planning device for plan_swaps, and the search over them. A large
// activation saved in forward for backward must otherwise leave the GPU during forward, where
// the compute is short and the link to the host busiest. When its producer can run again, a
// plan may instead discard it after its forward use, regenerate it at a backward step t where
// its chain fits, and from there evict it over the backward's idle link to the host and
// prefetch it for its use. gap_splits() proposes such (tensor, t) pairs; split_at() returns the
// lifetimes with t added to the tensor's uses, so that plan_swaps sees two gaps, (a, t) and
// (t, b), and may regenerate the first and move the second (or take either off as it likes).
// The extra use only steers the planner: residency under the plan's actions is the same under
// the true lifetimes (t lies inside the lifetime), every rule of docs/execution-model.md holds
// under them, and the caller keeps a split plan only when the simulator finds it faster.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/movable_kinds.h"
#include "plan/plan.h"
#include "plan/swap_planner.h"
#include "util/parallel.h"

namespace autovm {

struct GapSplit {
  TensorId tensor = kNoTensor;
  StepIndex at = 0;  // the backward step given to the tensor as a use
  bool operator==(const GapSplit&) const = default;
};

// Up to `max_tensors` of the largest activations of a movable kind with a gap from a forward
// use to a backward one and a producer that may run again (plan/recompute_ops.h; not in
// place); for each, the backward steps t inside that gap where unavoidable(t) + the tensor
// + its producer's inputs fit in the budget. In tensor order, then step order.
std::vector<GapSplit> gap_splits(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                 const std::vector<int64_t>& unavoidable, int64_t budget_bytes,
                                 MovableKinds movable, const RecomputeOps& recompute_ops,
                                 size_t max_tensors);

// `life` with split.at added to the uses of split.tensor.
std::vector<Lifetime> split_at(std::vector<Lifetime> life, const GapSplit& split);

// The search. Level by level, greedily: at each level every proposed split of the lifetimes
// the previous level kept (none at first) is planned with `options` and `hints` (the default
// select order and link weight: docs/planner.md, Gap splits). Of a tensor's feasible steps:
// every one when `coarse` is 0; else about `coarse` evenly spread (a stride apart, the last
// too), then the two steps half a stride either side of its fastest so far, a quarter, ...
// down to one step (the landscape is not smooth: this only samples it). A level's fastest plan,
// by the simulator, is kept when it beats the level before, and the search stops at the first
// that does not (or after `levels`). The trials of a round are independent and run on
// `threads` threads; the choice among them is made in their fixed order, so the result does
// not depend on the thread count.
struct SplitSearch {
  size_t max_tensors = 6;
  size_t coarse = 0;   // steps sampled first per tensor; 0: every feasible step
  size_t levels = 3;
  size_t threads = planning_threads();  // trials of a round run on these (the same plans)
};

struct SplitPlan {
  std::vector<GapSplit> splits;  // in the order the levels chose them
  std::vector<Lifetime> life;    // the lifetimes plan_swaps saw
  std::vector<Action> actions;
  double step_time_us = 0;       // simulated
};

// The plans each level kept, in level order (empty when no split plan could be made). Throws
// only what plan_swaps throws beyond Error(infeasible), which skips that trial.
std::vector<SplitPlan> search_gap_splits(
    const TrainingGraph& graph, const std::vector<Lifetime>& life,
    const std::vector<double>& compute_us, const Mechanism& mechanism,
    const DeviceProfile& device, const SwapOptions& options, const SelectionHints& hints,
    const SplitSearch& search);

}  // namespace autovm
