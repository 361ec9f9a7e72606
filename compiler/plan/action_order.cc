// The order of a plan's actions and the transfers kept off recompute reads (action_order.h).
#include "plan/action_order.h"

#include <algorithm>

namespace autovm {

// Actions the comparator cannot tell apart are the same action: the order is a function of
// the set, and one already in order (most are, after a pass's small change) is left as it is.
void sort_actions(std::vector<Action>& actions) {
  auto before = [](const Action& a, const Action& b) {
    if (a.after_step != b.after_step) return a.after_step < b.after_step;
    if (a.ready_before_step != b.ready_before_step) return a.ready_before_step < b.ready_before_step;
    // Recomputes before one step run in dependency order: forward steps in step order.
    StepIndex sa = a.kind == ActionKind::recompute ? a.source_step : -1;
    StepIndex sb = b.kind == ActionKind::recompute ? b.source_step : -1;
    if (sa != sb) return sa < sb;
    if (a.tensor != b.tensor) return a.tensor < b.tensor;
    return a.kind < b.kind;
  };
  if (!std::is_sorted(actions.begin(), actions.end(), before))
    std::sort(actions.begin(), actions.end(), before);
}

std::vector<std::pair<TensorId, StepIndex>> recompute_reads(const TrainingGraph& g,
                                                            const std::vector<Action>& actions) {
  std::vector<std::pair<TensorId, StepIndex>> reads;
  for (const Action& a : actions)
    if (a.kind == ActionKind::recompute)
      for (TensorId in : g.step(a.source_step).inputs) reads.emplace_back(in, a.ready_before_step);
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  return reads;
}

void keep_transfers_off_recompute_reads(const TrainingGraph& g, std::vector<Action>& actions) {
  const std::vector<std::pair<TensorId, StepIndex>> reads = recompute_reads(g, actions);
  for (Action& a : actions) {
    if (a.kind != ActionKind::evict && a.kind != ActionKind::prefetch) continue;
    // The reads of a.tensor in [after_step + 1, ready_before_step - 1]: [first, last).
    auto first = std::lower_bound(reads.begin(), reads.end(), std::make_pair(a.tensor, a.after_step + 1));
    auto last = std::lower_bound(first, reads.end(), std::make_pair(a.tensor, a.ready_before_step));
    if (first == last) continue;
    if (a.kind == ActionKind::prefetch)
      a.ready_before_step = first->second;
    else
      a.after_step = std::prev(last)->second;
  }
  sort_actions(actions);
}


}  // namespace autovm
