// Contract: the swap planner's greedy selection, plan_swaps. Given the training step, its
// memory timeline, predicted step times and a transfer mechanism, it chooses actions
// (docs/execution-model.md) so that resident bytes stay within the budget at every step,
// stalling the compute stream as little as it can. docs/planner.md tells the whole story:
// this selection, the refinement passes (plan/passes/) and the search over strategies
// (plan/search.h).
//
// Glossary:
//   tensor     a value of the training step (ir/types.h), `bytes` large
//   step       one node of the step, run in order 0 .. n-1; time is a step index
//   gap        two consecutive uses of a tensor with steps between (plan/gaps.h): it may be
//              off the GPU there
//   residency  which tensors occupy GPU memory at each step, and its bytes
//              (plan/residency.h, resident_bytes)
//   action     evict, prefetch, discard, recompute (plan/plan.h)
//   budget     the bytes resident_bytes may reach at any step
//
// plan_swaps, in order:
//   1. select  while some step s exceeds the budget (the one most over it, or the earliest or
//              latest: SwapOptions::order), choose one gap that covers s, and how to take its
//              tensor off there:
//                moved        evict / prefetch, off over the steps of the gap that were over
//                             the budget (a tail gap, gaps.h: evict only);
//                regenerated  discarded after the gap's first use, made again by a recompute
//                             chain (plan/residency.h) just before its next use (or before a
//                             step where another chain needs it), off over the whole gap up
//                             to its chain. The chain's live inputs and outputs stay resident
//                             there (pins); its dead ones are temporaries, counted in the
//                             moment before that step (or, with
//                             SelectionHints::temporaries_beside_step, on top of the step).
//              A chain is offered only when its temporaries, its pins and the tensor it
//              regenerates fit beside what those steps must hold already (their unavoidable
//              bytes and earlier chains' pins, temporaries and regenerated tensors): else a
//              step could be left over the budget with nothing left to take off.
//              Costs: a chain's compute (steps an earlier chain already runs there are free);
//              a transfer's predicted stall, from the link time left in the compute windows
//              around the gap after earlier choices (one link when not duplex), plus
//              SwapOptions::link_weight of its link time. The least cost per byte of s's
//              excess cleared wins (the larger on a tie). Gaps named in
//              SelectionHints::last_resort are considered only when no other gap relieves s (or,
//              move_only, never regenerated).
//   2. widen   plan/passes/widen.h: drop recompute pairs the budget does not need, give
//              transfers the most time the budget allows.
//   3. order   plan/action_order.h: transfers kept off recompute reads, actions sorted.
// Throws Error(infeasible) (gaps.h: check_budget_feasible) when no plan can meet the budget,
// or when the selection is left with an over-budget step and nothing to take off.
#pragma once

#include <vector>

#include "plan/device_profile.h"
#include "plan/gaps.h"
#include "plan/plan.h"

namespace autovm {

// Which over-budget step select fixes next: the one most over the budget, the earliest or the
// latest. No order is best for every model; the search (plan/search.h) tries several.
enum class SelectOrder { most_over, earliest, latest };

struct SwapOptions {
  int64_t budget_bytes = 0;
  bool allow_recompute = true;
  RecomputeOps recompute_ops;  // the ops a recompute chain may run (plan/recompute_ops.h)
  MovableKinds movable;  // kinds the plan may take off the GPU; the others stay resident
  // Strategy (the search plans with several and keeps the fastest by the simulator):
  SelectOrder order = SelectOrder::most_over;
  // The share of a transfer's link time its cost counts even when it hides behind compute:
  // the link is shared and the hiding estimate is optimistic (copy streams run in issue
  // order), so a hidden transfer is not free next to a recompute.
  double link_weight = 0.1;
};

// How the search (plan/search.h) steers the selection: not part of a plan's options, and empty
// (the execution model's counting, no last resorts) outside the search.
struct SelectionHints {
  // Count a chain's temporaries on top of everything its step holds, as if the chain ran
  // during the step, instead of in the moment before it (docs/execution-model.md), where what
  // the step allocates is not there yet. Stricter than the execution model, so every plan it
  // gives is valid; the greedy then takes fewer chains and moves more, which some models at
  // their least budget run faster with (docs/planner.md). The search tries both.
  bool temporaries_beside_step = false;
  // Gaps the selection takes only when no other gap can relieve the step (plan/ban_search.h):
  // a gap of `tensor` that starts after step `after` or ends before step `before` (-2: that
  // end not matched). With move_only, the gap is not a last resort but may not be
  // regenerated: only moved.
  struct Ban {
    TensorId tensor = kNoTensor;
    StepIndex after = -2;
    StepIndex before = -2;
    bool move_only = false;
    bool matches(const Gap& g) const {
      return g.tensor == tensor && (g.after == after || g.before == before);
    }
  };
  std::vector<Ban> last_resort;
};

// `base`: actions decided beforehand (e.g. a checkpointing policy's discards and recomputes).
// The planner keeps them, leaves their tensors alone, keeps the inputs of their recomputes
// resident where they run, and drops base discard/recompute pairs the budget turns out not to
// need. Returns base and new actions together. Base actions must name movable kinds only.
std::vector<Action> plan_swaps(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                               const std::vector<double>& compute_us, const Mechanism& mechanism,
                               const SwapOptions& options, std::vector<Action> base = {},
                               const SelectionHints& hints = {});

}  // namespace autovm
