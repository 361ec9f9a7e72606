// Contract: measured convolution workspaces cut to what the budget leaves at their step.
//
// A measured workspace (autovm-plan --conv-workspaces; training/conv_workspaces.h) is what
// cuDNN's fastest algorithm takes with memory to spare. Where the step's unavoidable bytes
// (plan/gaps.h) with it pass the budget, no plan could give it that much; cuDNN then runs the
// fastest algorithm whose workspace fits in what is free. fit_measured_workspaces shrinks each
// such workspace by the excess, never below the estimate it replaced (training/cost.h), so
// that the budget is met wherever the estimate alone would meet it. Shrinking one workspace
// changes only its own step's unavoidable bytes (a workspace lives for its step alone).
// Returns how many workspaces were cut; the tensors' bytes and shapes are updated.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/movable_kinds.h"
#include "training/training_step.h"

namespace autovm {

int fit_measured_workspaces(training::TrainingStep& ts, const std::vector<Lifetime>& life,
                            int64_t budget, MovableKinds movable);

}  // namespace autovm
