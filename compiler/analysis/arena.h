// Contract: one arena for the whole training step, so that a runtime allocates once.
//
// layout_arena gives every tensor an offset such that two tensors whose lifetimes overlap
// (inclusive intervals, lifetimes.h) never overlap in [offset, offset + bytes). It sweeps the
// steps in order like a best-fit heap: before step s it frees the tensors whose lifetime ended
// at s-1, then places the tensors born at s, largest first (ties by id), each in the smallest
// free block that holds it, or at the end of the arena (growing a free block that ends there).
// Offsets are multiples of `alignment`. O(n log n) in the number of tensors.
//
// The arena's size is at least the peak of live bytes (timeline.h); `size - peak` is the
// fragmentation the layout pays.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/lifetimes.h"

namespace autovm {

struct ArenaLayout {
  std::vector<int64_t> offset;  // by TensorId
  int64_t size = 0;             // bytes of the arena
  int64_t alignment = 256;
};

ArenaLayout layout_arena(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                         int64_t alignment = 256);

}  // namespace autovm
