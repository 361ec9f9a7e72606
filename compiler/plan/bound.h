// Contract: a lower bound on the training step's time under a budget, which no plan beats.
//
// Derivation. Let c_k be step k's compute time, C = sum c_k, and for a step s let E(s) be the
// bytes live at s beyond the budget that no recomputation could take off the GPU:
// E(s) = max(0, live(s) - budget - R(s)), with R(s) the bytes at s of tensors a cheap forward op
// could regenerate (recomputation costs at least 0, so they are counted as free). At step s at
// least E(s) bytes are off the GPU, so (execution model) their evictions completed before s
// started and their prefetches were issued after s finished:
//   start(s) >= max(C_{<s}, E(s) / bw_to_host)
//   end      >= start(s) + c_s + max(C_{>s}, E(s) / bw_to_device)
// The bound is the largest of these over s, and at least C. Fixed per-transfer costs and link
// sharing between directions only make real plans slower, so leaving them out keeps it a bound.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "plan/device_profile.h"

namespace autovm {

struct StepTimeBound {
  double bound_us = 0;
  double compute_us = 0;          // C
  StepIndex critical_step = -1;   // the s that sets the bound (-1: compute alone)
  int64_t must_move_bytes = 0;    // E at that step
};

// `recomputable_bytes[s]`: R(s) above (may be all zeros: the bound is then only tighter).
StepTimeBound lower_bound(const std::vector<int64_t>& live_bytes,
                          const std::vector<int64_t>& recomputable_bytes,
                          const std::vector<double>& compute_us, int64_t budget_bytes,
                          const Mechanism& mechanism);

}  // namespace autovm
