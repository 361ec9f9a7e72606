#include "analysis/arena.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <utility>

namespace autovm {
namespace {

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// Free blocks of the arena, found by offset (to coalesce) and by size (best fit).
class FreeList {
 public:
  explicit FreeList(int64_t alignment) : alignment_(alignment) {}

  int64_t allocate(int64_t bytes) {
    auto fit = by_size_.lower_bound({bytes, 0});
    if (fit != by_size_.end()) {
      auto [size, offset] = *fit;
      erase(offset, size);
      if (size > bytes) insert(offset + bytes, size - bytes);
      return offset;
    }
    // Nothing fits: grow the arena, reusing a free block that ends at the top.
    int64_t offset = end_;
    if (!by_offset_.empty()) {
      auto last = std::prev(by_offset_.end());
      if (last->first + last->second == end_) {
        offset = last->first;
        erase(last->first, last->second);
      }
    }
    end_ = offset + bytes;
    return offset;
  }

  void release(int64_t offset, int64_t bytes) {
    auto next = by_offset_.lower_bound(offset);
    if (next != by_offset_.end() && offset + bytes == next->first) {
      bytes += next->second;
      erase(next->first, next->second);
    }
    auto after = by_offset_.lower_bound(offset);
    if (after != by_offset_.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second == offset) {
        offset = prev->first;
        bytes += prev->second;
        erase(prev->first, prev->second);
      }
    }
    insert(offset, bytes);
  }

  int64_t end() const { return end_; }
  int64_t round(int64_t bytes) const { return align_up(bytes, alignment_); }

 private:
  void insert(int64_t offset, int64_t size) {
    by_offset_.emplace(offset, size);
    by_size_.emplace(size, offset);
  }
  void erase(int64_t offset, int64_t size) {
    by_offset_.erase(offset);
    by_size_.erase({size, offset});
  }

  int64_t alignment_;
  int64_t end_ = 0;
  std::map<int64_t, int64_t> by_offset_;
  std::set<std::pair<int64_t, int64_t>> by_size_;
};

}  // namespace

ArenaLayout layout_arena(const TrainingGraph& g, const std::vector<Lifetime>& life,
                         int64_t alignment) {
  assert(alignment > 0);
  ArenaLayout layout;
  layout.alignment = alignment;
  layout.offset.assign(g.tensors.size(), 0);
  size_t steps = static_cast<size_t>(std::max<StepIndex>(g.step_count(), 1));
  std::vector<std::vector<TensorId>> born(steps), dies(steps);
  for (const Tensor& t : g.tensors) {
    if (t.bytes == 0) continue;
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    born[static_cast<size_t>(l.first)].push_back(t.id);
    dies[static_cast<size_t>(l.last)].push_back(t.id);
  }
  FreeList heap(alignment);
  for (size_t s = 0; s < steps; ++s) {
    if (s > 0)
      for (TensorId t : dies[s - 1])
        heap.release(layout.offset[static_cast<size_t>(t)], heap.round(g.tensor(t).bytes));
    auto& now = born[s];
    std::sort(now.begin(), now.end(), [&](TensorId a, TensorId b) {
      int64_t ba = g.tensor(a).bytes, bb = g.tensor(b).bytes;
      return ba != bb ? ba > bb : a < b;
    });
    for (TensorId t : now)
      layout.offset[static_cast<size_t>(t)] = heap.allocate(heap.round(g.tensor(t).bytes));
  }
  layout.size = heap.end();
  return layout;
}

}  // namespace autovm
