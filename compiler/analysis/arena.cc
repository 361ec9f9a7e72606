#include "analysis/arena.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <set>
#include <span>
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

// The tensors with bytes grouped by a step of theirs (`step_of`), each group in id order,
// flattened: group s is ids_[begin_[s] .. begin_[s + 1]).
class StepLists {
 public:
  template <typename StepOf>
  StepLists(const TrainingGraph& g, size_t steps, StepOf step_of) : begin_(steps + 1, 0) {
    for (const Tensor& t : g.tensors)
      if (t.bytes != 0) ++begin_[step_of(t) + 1];
    for (size_t s = 0; s < steps; ++s) begin_[s + 1] += begin_[s];
    ids_.resize(begin_[steps]);
    std::vector<size_t> fill(begin_.begin(), begin_.end() - 1);
    for (const Tensor& t : g.tensors)
      if (t.bytes != 0) ids_[fill[step_of(t)]++] = t.id;
  }
  std::span<const TensorId> at(size_t s) const {
    return {ids_.data() + begin_[s], begin_[s + 1] - begin_[s]};
  }

 private:
  std::vector<size_t> begin_;
  std::vector<TensorId> ids_;
};

}  // namespace

ArenaLayout layout_arena(const TrainingGraph& g, const std::vector<Lifetime>& life,
                         int64_t alignment) {
  assert(alignment > 0);
  ArenaLayout layout;
  layout.alignment = alignment;
  layout.offset.assign(g.tensors.size(), 0);
  size_t steps = static_cast<size_t>(std::max<StepIndex>(g.step_count(), 1));
  auto first = [&](const Tensor& t) { return static_cast<size_t>(life[static_cast<size_t>(t.id)].first); };
  auto last = [&](const Tensor& t) { return static_cast<size_t>(life[static_cast<size_t>(t.id)].last); };
  const StepLists born(g, steps, first), dies(g, steps, last);
  FreeList heap(alignment);
  std::vector<TensorId> now;
  for (size_t s = 0; s < steps; ++s) {
    if (s > 0)
      for (TensorId t : dies.at(s - 1))
        heap.release(layout.offset[static_cast<size_t>(t)], heap.round(g.tensor(t).bytes));
    now.assign(born.at(s).begin(), born.at(s).end());
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
