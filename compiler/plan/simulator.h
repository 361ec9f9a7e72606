// Contract: an event simulation of one training step under a plan's actions.
//
// One compute stream runs the steps in order; step s starts when step s-1 has finished and
// every action with ready_before_step == s has completed (the difference is the stall before
// s). A recompute runs on the compute stream just before its ready_before_step and adds its
// source step's time. Transfers run on a copy stream per direction (evict: to host; prefetch:
// to device), each in issue order, starting no earlier than the end of their after_step
// (after_step -1: time 0); when the mechanism is not duplex, both directions share one queue.
// Discards run on their own queue and never delay compute. Times come from the profile's
// mechanism (Transfer::time_us). Actions with ready_before_step == n must finish before the
// step ends (the step time includes them).
#pragma once

#include <string>
#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"

namespace autovm {

struct SimResult {
  double step_time_us = 0;        // end of the last step (and of every action due by then)
  double compute_us = 0;          // sum of step compute times, recomputation included
  double recompute_us = 0;
  double stall_us = 0;            // total time the compute stream waited on transfers
  std::vector<double> start_us;   // by step
  std::vector<double> end_us;     // by step
  std::vector<double> stall_before_us;  // by step
  int64_t bytes_to_host = 0;
  int64_t bytes_to_device = 0;
  int late_actions = 0;           // actions the compute stream had to wait for
  std::vector<double> issue_us;   // by action
  std::vector<double> ready_us;   // by action
};

SimResult simulate(const TrainingGraph& graph, const std::vector<Action>& actions,
                   const std::vector<double>& compute_us, const Mechanism& mechanism,
                   const DeviceProfile& device);

// The driver's default with unified memory and no plan: at each step, tensors the step needs
// that are not on the GPU fault in at demand-paging speed; to make room the driver evicts the
// least recently used resident tensors at its eviction speed (both stall the step); dead
// tensors are freed without copying. Returns the same statistics (no actions).
SimResult simulate_demand_paging(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                 const std::vector<double>& compute_us, int64_t budget_bytes,
                                 const DeviceProfile& device);

}  // namespace autovm
