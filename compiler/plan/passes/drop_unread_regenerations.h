// Contract: drop_unread_regenerations, a clean-up of gap-split plans (plan/gap_split.h) before
// the simulator-judged passes.
//
// Why: a split use at step t that the plan no longer needs can leave a regeneration that
// nothing reads, which only costs compute.
//
// Rule: a recompute that makes x again, within its lifetime, before a step t that does not
// use x, where no recompute reads x at t or before x's next discard, and that discard comes
// before x's next use, is dropped with the discard after it (x stays off from its earlier
// discard to its next recompute: rule 4 kept), and so are the chain temporaries at t that
// nothing reads any more. Resident bytes only fall.
// Returns the number of recomputes dropped; the actions stay sorted (action_order.h).
#pragma once

#include <vector>

#include "plan/plan.h"

namespace autovm {

int drop_unread_regenerations(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                              std::vector<Action>& actions);

}  // namespace autovm
