// Contract: splitting a saved activation's gap, a planning device for plan_swaps. A large
// activation saved in forward for backward must otherwise leave the GPU during forward, where
// the compute is short and the link to the host busiest. When its producer can run again, a
// plan may instead discard it after its forward use, regenerate it at a backward step t where
// its chain fits, and from there evict it over the backward's idle link to the host and
// prefetch it for its use. gap_splits() proposes such (tensor, t) pairs; split_at() returns the
// lifetimes with t added to the tensor's uses, so that plan_swaps sees two gaps, (a, t) and
// (t, b), and may regenerate the first and move the second. The extra use only steers the
// planner: residency under the plan's actions is the same under the true lifetimes (t lies
// inside the lifetime), every rule of docs/execution-model.md is checked under them, and the
// pipeline keeps a split plan only when the simulator finds it faster.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/movable_kinds.h"

namespace autovm {

struct GapSplit {
  TensorId tensor = kNoTensor;
  StepIndex at = 0;  // the backward step given to the tensor as a use
};

// Up to `max_tensors` of the largest activations of a movable kind with a gap from a forward
// use to a backward one and a producer that may run again (a forward step, not a dropout);
// for each, up to `max_steps` backward steps t inside that gap, evenly spread over those where
// unavoidable(t) + the tensor + its producer's inputs fit in the budget. In tensor order, then
// step order.
std::vector<GapSplit> gap_splits(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                 const std::vector<int64_t>& unavoidable, int64_t budget_bytes,
                                 MovableKinds movable, size_t max_tensors, size_t max_steps);

// `life` with split.at added to the uses of split.tensor.
std::vector<Lifetime> split_at(std::vector<Lifetime> life, const GapSplit& split);

}  // namespace autovm
