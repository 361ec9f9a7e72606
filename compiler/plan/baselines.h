// Contract: the baseline policies AutoVM is compared with, as action lists that run through the
// same simulator (demand paging has its own simulation: simulator.h).
//   no_swap      no actions; fits only when the peak of live bytes fits the budget
//   vdnn         vDNN-style: after its forward use, evict the input of every convolution that
//                backward needs again; prefetch it one layer ahead (issued when the backward
//                step before the previous convolution's gradient finishes; for the first
//                convolution gradient of backward, when the forward and loss are done)
//   save_on_cpu  PyTorch's save_on_cpu-style: evict every activation (and the input batch)
//                that backward needs after its last forward use; fetch each when backward
//                needs it (issued after the step just before its use: no look-ahead)
//   checkpoint   checkpointing: keep the activations at segment boundaries (sqrt(n) segments of
//                the forward steps), discard the others after forward, and recompute each
//                segment's forward steps before its first backward use. A tensor is discarded
//                only when its step can be rerun there: every input persistent, regenerated
//                earlier in the same segment, or kept and still alive (execution-model.md has
//                no way to bring back a tensor whose lifetime has ended, such as a convolution
//                output that only its Relu read)
// "Forward use" means a use before the first backward step (forward and loss phases). A tensor
// is swapped or discarded only when at least one step lies between its last forward use and
// its first backward use. Evictions are issued after the last forward use and ready before the
// next step (the compute stream waits for them there); discards likewise. Actions come sorted
// by after_step, then in the order generated (by tensor, in forward order).
// Each returns the actions and the resident peak they reach (which may exceed the budget: the
// policy then does not fit).
//
// Only some of these step-time models have been checked against real training: a baseline's
// predicted step time is shown (summaries, the inspector) only when step_time_calibrated() says
// its model came within 1.5x of the measurement. docs/baselines.md has the figures.
#pragma once

#include <string>
#include <vector>

#include "plan/plan.h"
#include "plan/residency.h"

namespace autovm {

// Whether `policy`'s predicted step time has been measured to within 1.5x (docs/baselines.md):
// no_swap and checkpoint, in fp32, or in any precision when the step times are measured ones
// (autovm-plan --step-times). Under autocast the cost model's steps were not measured to within
// 1.5x (docs/baselines.md, "Under autocast"), so there neither is. demand_paging, vdnn and
// save_on_cpu have not been.
struct StepTimeSource {
  bool low_precision = false;   // --autocast bf16|fp16
  bool measured_steps = false;  // --step-times
};
bool step_time_calibrated(const std::string& policy, StepTimeSource source);

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

// Resident bytes under a list of actions: plan/residency.h.

}  // namespace autovm
