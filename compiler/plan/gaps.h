// Contract: where a tensor may be off the GPU, and what must stay resident whatever the plan.
//
// A gap of a tensor is a stretch between two consecutive uses a < b with at least one step in
// between: the tensor may be off during steps [a+1, b-1]. A persistent tensor (parameter,
// buffer, optimizer state) also has a wrap-around gap from its last use to its first use in the
// next training step: off during [last+1, n-1] and [0, first-1].
//
//   Time:      a   a+1 ...  b-1  b
//   resident   +---+              +---   (used at a and b)
//   may be off     [..........]
//
// A tensor read remotely at its last use (plan/remote_reads.h) is planned with that use taken
// out of its uses: its lifetime then runs past its last use, and that tail is a gap of its
// own, off during [last use + 1, lifetime's last step], left by an eviction and never brought
// back (the remote read replaces the prefetch).
//
// unavoidable_bytes(s) is what every plan keeps resident at step s: the tensors s uses (its
// working set, workspace included) and the live tensors no gap covers at s (an input or label
// before its first use). Its maximum is the smallest budget any plan can meet.
//
// Movable kinds (autovm-plan --movable): a trainer may be able to take only some kinds of
// tensor off the GPU (the PyTorch adapter moves saved activations only). A tensor of another
// kind has no gap: it is resident over its whole lifetime (a persistent one over every step),
// and counts as unavoidable there. A tensor of a kind that may leave at its last use only
// (movable_kinds.h) has the last step of its tail gap alone (the step that reads it remotely),
// and is unavoidable at every other step of its lifetime.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/movable_kinds.h"

namespace autovm {

struct Gap {
  TensorId tensor = kNoTensor;
  StepIndex after = 0;   // the use before the gap (a)
  StepIndex before = 0;  // the use after the gap (b); for a wrap gap, the first use
  bool wrap = false;     // persistent tensor: from its last use round to its first
  bool tail = false;     // from its last use to the end of its lifetime (before: that end + 1)
  bool covers(StepIndex s) const { return wrap ? (s > after || s < before) : (after < s && s < before); }
};

std::vector<Gap> find_gaps(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                           MovableKinds movable = {});

// For a non-persistent tensor of a kind that may not move freely (!movable.has(kind)): the last
// step of its lifetime at which it is resident whatever the plan, the step before its tail gap
// for a kind that may leave at its last use only, else its lifetime's end.
StepIndex resident_until(const Lifetime& life, TensorKind kind, MovableKinds movable);

std::vector<int64_t> unavoidable_bytes(const TrainingGraph& graph,
                                       const std::vector<Lifetime>& life,
                                       MovableKinds movable = {});

// What each step allocates as it starts (the moment before a step): plan/residency.h,
// step_allocations.

// Throws Error(infeasible) when some step's unavoidable bytes exceed the budget: names the step,
// the tensors it needs (largest first: its working set, then the live tensors of kinds that
// may not move) and the smallest budget that works.
void check_budget_feasible(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                           int64_t budget_bytes, MovableKinds movable = {});

}  // namespace autovm
