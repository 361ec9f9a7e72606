// Contract: an event simulation of one training step under a plan's actions.
//
// One compute stream runs the steps in order; step s starts when step s-1 has finished and
// every action with ready_before_step == s has completed (the difference is the stall before
// s). A recompute runs on the compute stream just before its ready_before_step and adds its
// source step's time. Transfers run on a copy stream per direction (evict: to host; prefetch:
// to device), each in issue order, starting no earlier than the end of their after_step
// (after_step -1: time 0); when the mechanism is not duplex, both directions share one queue.
// Discards run on their own queue and delay nothing (not even the end of the step); advices
// take no time. Transfer times come from `mechanism` (Transfer::time_us), for every transfer:
// the actions' own mechanism names are not consulted. Transfers with ready_before_step == n
// must finish before the training step ends (the step time includes them).
// Recomputes due before the same step that name the same source step (its several outputs)
// run it once. Times of one action: issue_us is when it is issued (the end of its after_step;
// for a recompute, when it starts), ready_us when it completes.
// Accounting: step_time_us == compute_us + stall_us, where stall_us is the sum of
// stall_before_us plus the wait at the end for transfers due by then.
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
  int late_actions = 0;           // transfers the compute stream (or the step's end) waited for
  int faults = 0;                 // demand paging: tensors faulted in (0 under a plan)
  std::vector<double> issue_us;   // by action
  std::vector<double> ready_us;   // by action
};

SimResult simulate(const TrainingGraph& graph, const std::vector<Action>& actions,
                   const std::vector<double>& compute_us, const Mechanism& mechanism,
                   const DeviceProfile& device);

// The driver's default with unified memory and no plan: at each step, tensors the step needs
// (inputs, outputs, workspace) that are not on the GPU fault in whole at demand-paging speed;
// to make room the driver first evicts the least recently used resident tensors the step does
// not need, at its eviction speed (both stall the step); dead tensors are freed without
// copying. A non-persistent tensor appears on the GPU at its first use without a copy (it is
// written there, or the trainer copies the batch in before the step). Persistent tensors start
// on the host; the step is simulated twice and the second (steady-state) pass is reported, so
// parameters start where the previous training step left them. A step whose own working set
// exceeds the budget still runs (thrashing): its missing tensors fault in, then the least
// recently used of them are evicted until the budget holds again, all charged to that step.
// Returns the same statistics (no actions; late_actions 0; faults counts tensors faulted in).
SimResult simulate_demand_paging(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                 const std::vector<double>& compute_us, int64_t budget_bytes,
                                 const DeviceProfile& device);

}  // namespace autovm
