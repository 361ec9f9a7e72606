// Contract: which forward steps a recompute chain may run again (docs/execution-model.md,
// "Recompute chains"; autovm-plan --recompute-ops). A step may run again when it is a forward
// step, is not a dropout (random: running it again gives other values) and its op is in the
// set, which holds every op by default. A trainer that can replay only some ops (the PyTorch
// adapter's saved-tensor hooks could re-run batch norm and ReLU from the tensors autograd kept,
// not a convolution) states them, and the planner, the bound and the gap splits then only chain
// those. One predicate for all three, so that the bound never allows a chain a plan may not use.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace autovm {

struct RecomputeOps {
  std::vector<std::string> ops;  // ONNX op types, sorted and unique; empty: every op

  bool all() const { return ops.empty(); }
  bool allows(const std::string& op) const {
    return ops.empty() || std::binary_search(ops.begin(), ops.end(), op);
  }
};

// Whether a recompute chain may run `step` again.
inline bool may_rerun(const Step& step, const RecomputeOps& ops) {
  return step.phase == Phase::forward && step.op != "Dropout" && ops.allows(step.op);
}

}  // namespace autovm
