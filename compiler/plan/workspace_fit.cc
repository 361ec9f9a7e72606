// Measured workspaces cut to the budget (workspace_fit.h).
#include "plan/workspace_fit.h"

#include <algorithm>

#include "plan/gaps.h"

namespace autovm {

int fit_measured_workspaces(training::TrainingStep& ts, const std::vector<Lifetime>& life,
                            int64_t budget, MovableKinds movable) {
  TrainingGraph& g = ts.graph;
  if (ts.measured_workspaces.empty()) return 0;
  const std::vector<int64_t> need = unavoidable_bytes(g, life, movable);
  int cut = 0;
  for (auto& mw : ts.measured_workspaces) {
    Tensor& w = g.tensors[static_cast<size_t>(mw.tensor)];
    const Lifetime& l = life[static_cast<size_t>(mw.tensor)];
    if (l.uses.empty()) continue;
    const int64_t over = need[static_cast<size_t>(l.uses.front())] - budget;
    if (over <= 0 || w.bytes <= mw.estimate_bytes) continue;
    mw.measured_bytes = w.bytes;
    mw.cut = true;
    w.bytes = std::max(mw.estimate_bytes, w.bytes - over);
    w.shape = Shape{w.bytes};
    ++cut;
  }
  return cut;
}

}  // namespace autovm
