// Contract: a lower bound on the training step's time under a budget, which no plan in the
// execution model (docs/execution-model.md) beats: moving tensors, recomputing single steps or
// whole chains (checkpointing), in any mix.
//
// Derivation. c_k is step k's compute time, C = sum c_k, C_<s and C_>s the sums before and
// after s. At step s, E(s) = live(s) - budget bytes must be off the GPU. Each is either moved
// or regenerated:
//   - moved bytes M were evicted before s started and are prefetched after s finished, so
//       start(s) >= max(C_<s, M / bw_to_host),   end >= start(s) + c_s + M / bw_to_device;
//   - the other E - M bytes are regenerated after s by re-running their producers, and any
//     producer input that died before s, recursively (a chain). The compute this adds is at
//     least Rc(E - M): a fractional knapsack over the tensors off-able at s, each costed at
//     the sum over its chain's steps of c_q / (number of those tensors whose chain holds q),
//     so that shared steps are never counted twice. Tensors nothing can regenerate (inputs,
//     persistent state) have infinite cost.
//   bound(s) = min over M in [0, E] of
//       max(C_<s, M/bw_to_host) + c_s + max(C_>s + Rc(E - M), M/bw_to_device)
// The function is convex in M, so a ternary search finds the minimum. The bound is the
// largest bound(s) over the steps with the most excess (the top 16), and at least C. Fixed
// costs per transfer and link sharing between directions only make plans slower.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"

namespace autovm {

struct StepTimeBound {
  double bound_us = 0;
  double compute_us = 0;          // C
  StepIndex critical_step = -1;   // the s that sets the bound (-1: compute alone)
  int64_t must_move_bytes = 0;    // E(s) at that step, moved or regenerated
};

StepTimeBound lower_bound(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live_bytes,
                          const std::vector<double>& compute_us, int64_t budget_bytes,
                          const Mechanism& mechanism);

}  // namespace autovm
