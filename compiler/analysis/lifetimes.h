// Contract: every tensor's lifetime in the training step.
//
//   Time:     0    1    2    3    4    5        (step indices)
//   A         def  use       use               lifetime [0, 3]
//   B              def  use                    lifetime [1, 2]
//   param     [0 ............................5] persistent: the whole step
//
// The interval [first, last] is INCLUSIVE at both ends: the tensor occupies memory while steps
// first..last run, and is freed after step `last` finishes.
//   - parameters, buffers, optimizer state persist across training steps: [0, n-1];
//   - inputs and labels are present before step 0: [0, last use];
//   - everything else is allocated by the step that first writes it: [definition, last use];
//   - a workspace lives during its one step.
// `uses` lists every step that reads or writes the tensor, in order, without repeats.
#pragma once

#include <vector>

#include "ir/graph.h"

namespace autovm {

struct Lifetime {
  StepIndex first = 0;  // inclusive
  StepIndex last = 0;   // inclusive
  std::vector<StepIndex> uses;
  bool persistent = false;
};

std::vector<Lifetime> compute_lifetimes(const TrainingGraph& graph);

}  // namespace autovm
