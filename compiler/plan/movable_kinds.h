// Contract: the tensor kinds a plan may take off the GPU (autovm-plan --movable). A tensor of
// another kind is never evicted, discarded or recomputed: it stays resident over its whole
// lifetime (plan/gaps.h says how that counts).
//
// Between the two, a kind may leave only at its last use (autovm-plan --movable-at-last-use),
// for a trainer that can reach such a tensor only when the step that reads it last is about to
// run (the PyTorch adapter's activation gradients): it may be off at that step alone, read
// remotely there (plan/remote_reads.h), by an eviction issued after the step before it. It is
// never prefetched, discarded or recomputed, and resident at every other step of its lifetime.
#pragma once

#include <cstdint>

#include "ir/types.h"

namespace autovm {

// Bit k stands for TensorKind k; every kind fully movable by default, none at its last use only.
struct MovableKinds {
  static constexpr uint32_t kAll = (uint32_t(1) << kTensorKindCount) - 1;
  uint32_t bits = kAll;
  uint32_t last_use_bits = 0;  // kinds that may leave only to be read remotely at their last use
  bool has(TensorKind k) const { return (bits >> unsigned(k)) & 1; }
  bool at_last_use_only(TensorKind k) const { return !has(k) && ((last_use_bits >> unsigned(k)) & 1); }
  // Whether a tensor of kind k may be read remotely at its last use (either way of moving).
  bool reads_remotely(TensorKind k) const { return has(k) || at_last_use_only(k); }
  bool all() const { return bits == kAll; }
  void add(TensorKind k) { bits |= uint32_t(1) << unsigned(k); }
  void add_at_last_use(TensorKind k) { last_use_bits |= uint32_t(1) << unsigned(k); }
  // Every kind that may move at all as fully movable: fewer constraints, so a lower bound
  // planned with it stays a lower bound (plan/bound.h).
  MovableKinds relaxed() const { return {bits | last_use_bits, 0}; }
};

}  // namespace autovm
