// Contract: the baseline policies AutoVM is compared with, as action lists that run through the
// same simulator (demand paging has its own simulation: simulator.h).
//   no_swap      no actions; fits only when the peak of live bytes fits the budget
//   vdnn         vDNN-style: after its forward use, evict the input of every convolution that
//                backward needs again; prefetch it one layer ahead (issued when the backward
//                step before the previous convolution's gradient finishes)
//   save_on_cpu  PyTorch's save_on_cpu-style: evict every activation that backward needs after
//                its last forward use; fetch each when backward needs it (issued after the
//                step just before its use: no look-ahead)
//   checkpoint   checkpointing: keep the activations at segment boundaries (sqrt(n) segments of
//                the forward steps), discard the others after forward, and recompute each
//                segment's forward steps before its first backward use
// Each returns the actions and the resident peak they reach (which may exceed the budget: the
// policy then does not fit).
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"

namespace autovm {

struct BaselinePlan {
  std::string policy;
  std::vector<Action> actions;
  int64_t resident_peak_bytes = 0;
};

BaselinePlan baseline_vdnn(const TrainingGraph& g, const std::vector<Lifetime>& life,
                           const std::string& mechanism);
BaselinePlan baseline_save_on_cpu(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                  const std::string& mechanism);
BaselinePlan baseline_checkpoint(const TrainingGraph& g, const std::vector<Lifetime>& life);

// Resident bytes per step under a list of actions (execution-model.md's residency rules).
std::vector<int64_t> resident_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<Action>& actions);

}  // namespace autovm
