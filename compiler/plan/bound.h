// Contract: a lower bound on the training step's time under a budget, which no plan in the
// execution model (docs/execution-model.md) beats: moving tensors, recomputing single steps or
// whole chains (checkpointing), in any mix; only moving when allow_recompute is false; only
// the kinds in `movable`; only chains of ops in recompute_ops. docs/lower-bound.md derives it.
//
//   bound = max( C + sum_b F(b)                    compute and forced stalls
//              , C + windows term                  stretches forced off the GPU
//              , bound(s), whole-tensor term(s)    at a choice of over-budget steps s
//              , pairs and sequences of steps )
//
// Residency here is a relaxation of plan/residency.h's, the planner's: a chain is taken as at
// the first step of a piece of a gap (never longer, never needing more, than later in the
// piece), its live inputs are left out of the fit test at the step it runs before, and each
// term takes the tensors off at best on its own. Each only lets more plans pass, so the bound
// stays below every plan. Deterministic; `explain` keeps every step's terms
// (autovm-plan --explain-bound).
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/gaps.h"
#include "plan/recompute_ops.h"

namespace autovm {

// bound(s) at one step s and its terms at the M that attains it (autovm-plan --explain-bound).
struct StepBoundTerms {
  StepIndex step = -1;
  double excess_bytes = 0;       // E(s)
  double off_able_bytes = 0;     // live(s) - unavoidable(s)
  double regenerable_bytes = 0;  // the off-able bytes some recompute can make again
  double moved_bytes = 0;        // M
  double departure_us = 0;       // Dep(M): the earliest step s can start
  double recompute_us = 0;       // Rc(E - M)
  double recompute_apart_us = 0; // Rc_apart(E - M): the part that adds to the windows term
  double arrival_us = 0;         // Arr(M): from the end of s
  double bound_us = 0;           // bound(s)
  double whole_tensor_us = 0;    // the whole-tensor term at s (docs/lower-bound.md)
};

// The term that sets the bound: C alone (nothing over the budget), C + the windows term (at
// least the forced stalls), bound(s) at one step, the whole-tensor term at one step, or a pair.
enum class BoundTerm { compute, windows, step, whole_tensor, pair };

struct StepTimeBound {
  double bound_us = 0;
  double compute_us = 0;          // C
  double forced_stall_us = 0;     // sum over steps b of max(F(b), D(b)): forced arrivals and departures
  double window_stall_us = 0;     // the windows term's stalls (>= forced_stall_us): docs/lower-bound.md
  StepIndex critical_step = -1;   // the s that sets the bound (-1: C + the windows term)
  StepIndex pair_end = -1;        // s2 when the pair (critical_step, s2) sets it; else -1
  // When a pair or a sequence sets it: its steps in order (critical_step, pair_end the last two).
  std::vector<StepIndex> sequence;
  BoundTerm set_by = BoundTerm::compute;
  int64_t must_move_bytes = 0;    // E(s) at that step, moved or regenerated
  // With `explain`: bound(s) at every candidate step, in step order.
  std::vector<StepBoundTerms> steps;
};

StepTimeBound lower_bound(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live_bytes,
                          const std::vector<double>& compute_us, int64_t budget_bytes,
                          const Mechanism& mechanism, MovableKinds movable = {},
                          bool allow_recompute = true, const RecomputeOps& recompute_ops = {},
                          bool explain = false);

}  // namespace autovm
