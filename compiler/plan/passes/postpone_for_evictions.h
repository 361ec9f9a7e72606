// Contract: postpone_for_evictions, a simulator-judged refinement pass (pass_support.h), run
// after delay_transfers.
//
// Why: an eviction a step waits for was given that step as its deadline because the budget
// had no room after it; often the room went to a prefetch issued early, for hiding.
//
// Rule: for each stalled step st whose last wait is an evict e (worst stall first), each
// prefetch whose tensor is resident at st only because it was issued at or before st is tried
// issued later: just late enough to be off at st, then by doubling steps, up to its
// ready_before_step - 1 and before any step where a recompute reads its tensor. e's deadline
// is then moved as late as the budget (resident_bytes) allows, but not past its tensor's next
// use nor past the issue of its next prefetch. A change is kept when the simulated step time
// drops.
// Keeps every rule: the prefetched tensor is resident over fewer steps, the evicted one over
// more, within the budget, with no use in its new transfer window.
// Work: at most `max_simulations` simulations and resident-byte counts together. Returns the
// simulated step time of the actions kept.
#pragma once

#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"

namespace autovm {

double postpone_for_evictions(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                              const std::vector<double>& compute_us, const Mechanism& mechanism,
                              const DeviceProfile& device, int64_t budget_bytes,
                              std::vector<Action>& actions, int max_simulations);

}  // namespace autovm
