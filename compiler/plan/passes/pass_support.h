// Contract: what the refinement passes (plan/passes/) share. Every simulator-judged pass
// works the same way:
//
//   sim = simulate(actions)                     (once, after keep_transfers_off_recompute_reads)
//   loop: for a stalled step, worst first (stalled_transfers):
//           trial = actions with one change      (the pass's own rule)
//           keep_if_faster(trial)                (one of at most max_simulations simulations)
//         until a round keeps nothing
//
// so a pass never makes the simulated step time worse, and its work is bounded by the number
// of simulations its caller grants.
#pragma once

#include <set>
#include <utility>
#include <vector>

#include "plan/device_profile.h"
#include "plan/plan.h"
#include "plan/residency.h"
#include "plan/simulator.h"

namespace autovm {

// Whether two transfers share a copy queue (one per direction; one in all when not duplex).
inline bool same_copy_queue(const Mechanism& mech, const Action& a, const Action& b) {
  return !mech.duplex || a.kind == b.kind;
}

// Sorts `trial` and simulates it (one of `left` simulations); when it is faster than `sim`,
// it replaces `actions` and its simulation `sim`. Returns whether it did.
bool keep_if_faster(const TrainingGraph& g, const std::vector<double>& compute_us,
                    const Mechanism& mech, const DeviceProfile& device, std::vector<Action>& trial,
                    std::vector<Action>& actions, SimResult& sim, int& left);

// The latest after_step prefetch `j` may be given: before its deadline, and before every step
// it now keeps its tensor resident for where a recompute reads that tensor (rule 5 of
// docs/execution-model.md: a recompute's inputs are resident where it runs).
StepIndex latest_issue(const TrainingGraph& g, const std::vector<Action>& actions, size_t j);

// The transfer each stalled step waited for last (its stall, its index in `actions`), worst
// stall first.
std::vector<std::pair<double, size_t>> stalled_transfers(const TrainingGraph& g,
                                                         const std::vector<Action>& actions,
                                                         const SimResult& sim);

// The evict/prefetch pair of `i` (a transfer of a non-persistent tensor): {evict, prefetch}, or
// {n, n} when it has none.
std::pair<size_t, size_t> moved_pair(const std::vector<Action>& actions, const TensorResidency& res,
                                     size_t i);

// Drops chain temporaries due at the given steps that no other recompute there reads any more
// (after a recompute was brought forward out of their chain).
void prune_temporaries(const TrainingGraph& g, const std::vector<Lifetime>& life,
                       const std::set<StepIndex>& steps, std::vector<Action>& actions);

}  // namespace autovm
