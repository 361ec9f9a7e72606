// Contract: advance_evictions, the last simulator-judged refinement pass (pass_support.h).
//
// Why: an eviction is issued when its after_step ends, and its copy queue may have stood idle
// since the transfer before it finished (delay_transfers moves an eviction behind another by
// giving it a later after_step, often later than the other needs).
//
//   queue   [-- prev --]    idle    [-- evict --]
//   after   [-- prev --][-- evict --]
//
// Rule: for each eviction, in the order its queue runs them, after_step is tried as early as
// the after_step of the transfer before it on that queue (so the queue keeps its order), and
// no earlier than the last step before ready_before_step where its tensor is used, read by a
// recompute (rule 3), or made resident by a prefetch or a recompute, nor its first step. A
// change is kept when the simulated step time drops.
// Keeps every rule: residency is unchanged (an evicted tensor is resident through
// ready_before_step - 1).
// Work: at most `max_simulations` simulations. Returns the actions sorted (action_order.h)
// and their simulated step time.
#pragma once

#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"

namespace autovm {

double advance_evictions(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                         const std::vector<double>& compute_us, const Mechanism& mechanism,
                         const DeviceProfile& device, std::vector<Action>& actions,
                         int max_simulations);

}  // namespace autovm
