// Contract: the one home in the compiler of docs/execution-model.md's residency rules
// ("Residency", "Recompute chains and temporaries", "The moment before a step"): what is
// resident at step s under a list of actions, which recompute makes a chain temporary, what
// the moment before a step holds, and how a recompute chain is built. The greedy selection
// (swap_planner.cc), the refinement passes, the baselines and the driver's prediction use
// these; the lower bound (plan/bound.h) keeps a relaxed version and says how
// it differs. The verifier (tools/inspect/) has its own copy on purpose: it shares no code
// with the planner.
//
// Each step t has two moments where memory is counted:
//
//   step:             t - 1    |  before t   |    t
//   resident          R(t - 1) |  R(t) - A(t) + T(t)  |  R(t)
//                               chains run here: their temporaries T(t) exist, what t
//                               allocates as it starts, A(t), does not yet
//
// resident_bytes(t) = R(t) + max(0, T(t) - A(t))   (moment_before_excess)
//
//   term            meaning
//   R(t)            bytes of the tensors resident at t (the table of execution-model.md)
//   A(t)            step_allocations(t): t's outputs whose lifetime begins at t and that it
//                   does not read, and its workspace less the trainer's reserve
//   T(t)            chain temporaries made before t (is_chain_temporary)
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/movable_kinds.h"
#include "plan/plan.h"
#include "plan/recompute_ops.h"

namespace autovm {

// Whether an action of this kind takes its tensor off the GPU or brings it back: advice and a
// remote read (the tensor stays off) do neither.
inline bool changes_residency(ActionKind k) {
  return k != ActionKind::advise && k != ActionKind::read_remote;
}

// A recompute whose ready_before_step lies after its (non-persistent) tensor's lifetime: a
// chain temporary, resident in the moment before ready_before_step only.
inline bool is_chain_temporary(const Action& a, const std::vector<Lifetime>& life) {
  const Lifetime& l = life[size_t(a.tensor)];
  return a.kind == ActionKind::recompute && !l.persistent && a.ready_before_step > l.last;
}

// Bytes each step allocates when it starts running, after the recompute chains before it have
// run: its outputs whose lifetime begins there and that it does not read, and its workspace
// less the trainer's reserve (Step::reserve_bytes, which may be held before the step too).
// They are resident at the step but not yet at the moment before it, where chain temporaries
// are.
std::vector<int64_t> step_allocations(const TrainingGraph& graph,
                                      const std::vector<Lifetime>& life);

// What the moment before a step adds to its resident bytes: the chain temporaries made
// before it, as far as they exceed what the step allocates as it starts.
inline int64_t moment_before_excess(int64_t temporary_bytes, int64_t allocated_bytes) {
  return std::max<int64_t>(0, temporary_bytes - allocated_bytes);
}

// Resident bytes per step under a list of actions: at each step s the larger of its two
// moments, resident(s) + moment_before_excess(temporaries before s, step_allocations(s)).
// With `allocated`: step_allocations(g, life), worked out once by a caller that counts many
// action lists of one graph.
std::vector<int64_t> resident_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<Action>& actions,
                                    const std::vector<int64_t>& allocated);
std::vector<int64_t> resident_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<Action>& actions);

// One tensor's residency under a list of actions (the same rules as resident_bytes, asked of
// one tensor at one step). Holds references: the actions must outlive it and not change.
class TensorResidency {
 public:
  TensorResidency(const TrainingGraph& g, const std::vector<Lifetime>& life,
                  const std::vector<Action>& actions);

  // The indices in the action list of y's actions, in list order.
  const std::vector<size_t>& of(TensorId y) const { return of_[size_t(y)]; }

  // Whether y is resident at step t (a chain temporary of y before t counts).
  bool on(TensorId y, StepIndex t) const;

  // Whether an action makes y a chain temporary before step t.
  bool temporary_at(TensorId y, StepIndex t) const;

 private:
  const std::vector<Lifetime>& life_;
  const std::vector<Action>& actions_;
  std::vector<std::vector<size_t>> of_;
};

// --- Recompute chains (execution-model.md, "Recompute chains and temporaries") ---
//
// To regenerate x before step `at`, a chain runs x's forward producer again, and, recursively,
// the producers of its inputs whose lifetime has ended by `at` (made as temporaries). Every
// tensor a chain step touches is, at `at`:
//
//   bytes == 0                          nothing to do
//   live (persistent, or first <= at <= last)
//                                       the caller's rule (Rules::live): kept resident
//                                       (a pin), brought back, or refused
//   dead, of a movable kind, made before `at`
//                                       a temporary: one an earlier chain made there
//                                       (Rules::earlier_temporary) or this chain's; an
//                                       input's producer joins the chain, an output does not
//   otherwise                           no chain
//
// A chain has at most kMaxChainSteps steps.
constexpr size_t kMaxChainSteps = 12;

// The forward step a recompute chain may run again to make x, or null: x is persistent, an
// input or a label, or its producer may not run again (plan/recompute_ops.h) or updates x in
// place.
const Step* rerunnable_producer(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                const RecomputeOps& ops, TensorId x);

// What every chain holds; callers extend it with what their rules record.
struct RecomputeChain {
  StepIndex at = 0;
  std::vector<StepIndex> steps;       // in the order added: callers sort them
  std::vector<TensorId> temporaries;  // new at `at` (not made there by an earlier chain)
  int64_t temporary_bytes = 0;
};

// The chain builder. `Rules` provides, for its chain type `Chain` (a RecomputeChain):
//   bool live(TensorId y, bool produce, Chain& c) const;   y live at c.at (produce: y is an
//        input of a chain step, not an output)
//   bool earlier_temporary(TensorId y, StepIndex at) const;
// A template so that the selection's hot loop calls its rules directly.
template <class Rules, class Chain>
class ChainBuilder {
 public:
  ChainBuilder(const TrainingGraph& g, const std::vector<Lifetime>& life, const RecomputeOps& ops,
               MovableKinds movable, const Rules& rules)
      : g_(g), life_(life), ops_(ops), movable_(movable), rules_(rules) {}

  // Adds x's producer (and, recursively, the producers of its dead inputs) to the chain.
  // False when no chain can make x at c.at.
  bool add_producer(TensorId x, Chain& c) const {
    const Step* producer = rerunnable_producer(g_, life_, ops_, x);
    if (!producer) return false;
    const Step& p = *producer;
    if (std::find(c.steps.begin(), c.steps.end(), p.id) != c.steps.end()) return true;
    if (c.steps.size() >= kMaxChainSteps) return false;
    c.steps.push_back(p.id);
    for (TensorId o : p.outputs)
      if (o != x && !need(o, false, c)) return false;
    for (TensorId in : p.inputs)
      if (!need(in, true, c)) return false;
    return true;
  }

  // Tensor y, touched by a chain step at c.at (the table above). False when no rule works.
  bool need(TensorId y, bool produce, Chain& c) const {
    if (g_.tensor(y).bytes == 0) return true;
    const Lifetime& l = life_[size_t(y)];
    if (l.persistent || (l.first <= c.at && c.at <= l.last)) return rules_.live(y, produce, c);
    if (l.first > c.at || !movable_.has(g_.tensor(y).kind)) return false;
    if (rules_.earlier_temporary(y, c.at)) return true;
    if (std::find(c.temporaries.begin(), c.temporaries.end(), y) != c.temporaries.end()) return true;
    c.temporaries.push_back(y);
    c.temporary_bytes += g_.tensor(y).bytes;
    return !produce || add_producer(y, c);
  }

 private:
  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  const RecomputeOps& ops_;
  MovableKinds movable_;
  const Rules& rules_;
};

}  // namespace autovm
