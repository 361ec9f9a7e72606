// Contract: the tensor kinds a plan may take off the GPU (autovm-plan --movable). A tensor of
// another kind is never evicted, discarded or recomputed: it stays resident over its whole
// lifetime (plan/gaps.h says how that counts).
#pragma once

#include <cstdint>

#include "ir/types.h"

namespace autovm {

// Bit k stands for TensorKind k; every kind by default.
struct MovableKinds {
  static constexpr uint32_t kAll = (uint32_t(1) << kTensorKindCount) - 1;
  uint32_t bits = kAll;
  bool has(TensorKind k) const { return (bits >> unsigned(k)) & 1; }
  bool all() const { return bits == kAll; }
  void add(TensorKind k) { bits |= uint32_t(1) << unsigned(k); }
};

}  // namespace autovm
