#include "analysis/timeline.h"

#include <algorithm>

namespace autovm {

MemoryTimeline compute_timeline(const TrainingGraph& g, const std::vector<Lifetime>& life) {
  MemoryTimeline tl;
  size_t n = static_cast<size_t>(g.step_count());
  // by_kind first holds differences (+bytes at first, -bytes after last), then their running
  // sums.
  tl.by_kind.assign(n, BytesByKind{});
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    auto k = static_cast<size_t>(t.kind);
    auto first = static_cast<size_t>(l.first), after = static_cast<size_t>(l.last) + 1;
    if (first < n) tl.by_kind[first][k] += t.bytes;
    if (after < n) tl.by_kind[after][k] -= t.bytes;
  }
  tl.total.resize(n);
  BytesByKind running{};
  for (size_t s = 0; s < n; ++s) {
    int64_t total = 0;
    for (size_t k = 0; k < running.size(); ++k) {
      running[k] += tl.by_kind[s][k];
      total += running[k];
    }
    tl.by_kind[s] = running;
    tl.total[s] = total;
    if (total > tl.peak_bytes) {
      tl.peak_bytes = total;
      tl.peak_step = static_cast<StepIndex>(s);
      tl.peak_by_kind = running;
    }
  }
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    if (l.first <= tl.peak_step && tl.peak_step <= l.last) tl.peak_tensors.push_back(t.id);
  }
  std::sort(tl.peak_tensors.begin(), tl.peak_tensors.end(), [&](TensorId a, TensorId b) {
    int64_t ba = g.tensor(a).bytes, bb = g.tensor(b).bytes;
    return ba != bb ? ba > bb : a < b;
  });
  return tl;
}

}  // namespace autovm
