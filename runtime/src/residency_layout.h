// Contract: the arena packed by residency. The planner lays tensors out by lifetime
// (compiler/analysis/arena.h): a tensor keeps its range from its first to its last step, evicted
// or not, so the arena is as large as the step's peak without swapping. Where an evicted tensor's
// bytes wait in a host buffer of the runtime's own (the mapped mechanism, the host backend), its
// range is free while it is off the device; pack_by_residency() lays tensors out so that two
// tensors overlap in space only if they are never on the device at the same step. The arena then
// needs about the budget, not the peak, and each tensor still has one address for the runtime's
// life. (Managed mechanisms cannot use it: an evicted managed range still holds the bytes.)
//
// On the device. A tensor occupies its range over the steps, inclusive at both ends, from its
// allocation (its first step; for a persistent one step -1, before the training step, when the
// trainer may write it), a prefetch's after_step + 1 or a recompute's ready_before_step, to an
// evict's
// ready_before_step - 1, a discard's after_step, or its last step (the last step of all for a
// persistent one). This is the executor's resident set (executor.h), where a copy in flight
// counts resident. A persistent tensor the plan keeps on the host occupies step -1 only until
// its first prefetch (its initial contents are moved to the host at the first step_begin(0)).
// A tensor read remotely at step s (read_remote) where its backend reads it in its own range (the
// host backend copies its host copy there for s) occupies that range at s too, though it is
// off the device; where the backend reads it elsewhere (the mapped mechanism: where its host
// copy is mapped), it does not.
//
// Ordering. Every use of a range is ordered after the previous occupant's last use by the
// compute stream, except one: a prefetch issued after step p may start copying once step p has
// run, while an eviction that the compute stream first waits for at step p + 1 (ready_before_step
// p + 1), or, for a prefetch after step -1, a persistent tensor's move to the host before the
// training step, may still be reading the range. `prefetch_waits` lists those evictions per
// prefetch; the backend makes the copy wait for them.
//
// Points: each step s has two moments (docs/execution-model.md, "The moment before a step"): the
// one before it (where its recompute chains run, with their temporaries) and s itself. A tensor
// on the device at s is there at both, except one that s allocates as it starts
// (allocated_by_its_step, plan.h), there at s only; a chain temporary is there in the moment
// before its step only. So the two may share a range.
//
// Packing: tensors, and chain temporaries over their one moment, are placed in an order, each at
// an aligned offset where it overlaps in space no placed one it shares a moment with. Three orders
// (largest first; largest bytes x steps first; most steps first) with first fit and with best
// fit; the smallest arena wins (above kOnePassItems items, the first order and first fit only).
// Items on the device at every step are laid first, end to end. O(n * m) a pass, m the items
// sharing a step with one: ResNet-152 at batch 128 (2,744 tensors) packs in 0.2 s on the
// development machine. Plans above kMaxPackedTensors, and plans packing cannot shrink, keep the
// planner's layout.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "plan.h"

namespace autovm::rt {

inline constexpr size_t kMaxPackedTensors = 16384;
inline constexpr size_t kOnePassItems = 4096;  // above: largest first, first fit only

using StepRange = std::pair<StepIndex, StepIndex>;  // [first, last], both inclusive

struct ResidencyLayout {
  std::vector<int64_t> offset;  // [tensor] in the packed arena
  int64_t arena_bytes = 0;
  // Chain temporaries are packed too, over their one step: [action index] the action's
  // temporary_offset, counted from the end of the arena (so negative: inside it), or
  // kNoTemporary.
  // Unpacked, the plan's room after the arena (Plan::temporary_bytes) and offsets in it.
  std::vector<int64_t> temporary_offset;
  int64_t temporary_bytes = 0;
  int64_t peak_bytes = 0;  // the most bytes on the device at one moment: no packing needs less
  // [action index] for prefetches: the tensors whose evictions the copy must follow.
  std::vector<std::vector<TensorId>> prefetch_waits;
};

// Where each tensor is on the device, in step ranges (sorted, disjoint); empty for a tensor never
// on the device. Chain temporaries (Action::temporary_offset) lie after the arena: not counted.
// `remote_in_place`: the steps that read a tensor remotely count (contract, "On the device").
std::vector<std::vector<StepRange>> occupancy(const Plan& plan, bool remote_in_place = true);

// The packed layout; `alignment` a power of two. When packing cannot beat the planner's arena
// (or the plan is too large to pack), the planner's offsets, with the waits they need.
ResidencyLayout pack_by_residency(const Plan& plan, int64_t alignment = 256,
                                  bool remote_in_place = true);

// The plan with the layout's offsets and arena size.
Plan with_layout(const Plan& plan, const ResidencyLayout& layout);

}  // namespace autovm::rt
