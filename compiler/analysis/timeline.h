// Contract: the memory timeline of the training step without any swapping: at every step, the
// bytes of the tensors whose lifetime contains that step, by kind; the peak, the first step
// where it happens, and the tensors that make it up.
//
// The peak of live bytes is the bound no arena layout can beat (arena.h reports against it).
#pragma once

#include <array>
#include <vector>

#include "analysis/lifetimes.h"

namespace autovm {

using BytesByKind = std::array<int64_t, kTensorKindCount>;

struct MemoryTimeline {
  std::vector<BytesByKind> by_kind;  // [step][kind]
  std::vector<int64_t> total;        // [step]
  int64_t peak_bytes = 0;
  StepIndex peak_step = 0;           // the first step where total == peak_bytes
  BytesByKind peak_by_kind{};
  std::vector<TensorId> peak_tensors;  // live at peak_step, by bytes (largest first), then id
};

MemoryTimeline compute_timeline(const TrainingGraph& graph, const std::vector<Lifetime>& life);

}  // namespace autovm
