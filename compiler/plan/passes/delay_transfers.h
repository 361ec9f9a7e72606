// Contract: delay_transfers, the first simulator-judged refinement pass (pass_support.h).
//
// Why: copy streams run in issue order, so a transfer issued early with a late deadline can
// hold up a later one that a step waits for.
//
//   queue   [--- a (due late) ---][-- l (a step waits for it) --]
//   after   [-- l --][--- a ---]           a issued when l is
//
// Rule: for the transfer l each stalled step waited for last (worst stall first), each
// transfer a on the same copy queue that was issued no later, was still busy when l was
// issued and is due later, is tried issued at l's after_step instead (at most
// ready_before_step - 1; a prefetch never past a step where a recompute reads its tensor:
// latest_issue). A change is kept when the simulated step time drops; the search then starts
// again from the new plan.
// Keeps every rule: an evicted tensor stays resident until ready_before_step as before, a
// prefetched one is resident from after_step + 1, later but still at every recompute that
// reads it, and no use moves into [after_step + 1, ready_before_step - 1].
// Work: at most `max_simulations` simulations. Returns the actions sorted (action_order.h)
// and their simulated step time.
#pragma once

#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"

namespace autovm {

double delay_transfers(const TrainingGraph& graph, const std::vector<double>& compute_us,
                       const Mechanism& mechanism, const DeviceProfile& device,
                       std::vector<Action>& actions, int max_simulations);

}  // namespace autovm
