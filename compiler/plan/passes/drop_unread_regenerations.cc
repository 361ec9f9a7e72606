// The drop_unread_regenerations pass (passes/drop_unread_regenerations.h).
#include "plan/passes/drop_unread_regenerations.h"

#include <algorithm>
#include <set>

#include "plan/action_order.h"
#include "plan/passes/pass_support.h"
#include "plan/residency.h"

namespace autovm {

int drop_unread_regenerations(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              std::vector<Action>& actions) {
  auto reads = [&](const Action& b, TensorId x) {
    if (b.kind != ActionKind::recompute) return false;
    const Step& s = g.step(b.source_step);
    return std::find(s.inputs.begin(), s.inputs.end(), x) != s.inputs.end();
  };
  int dropped = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& r = actions[i];
    if (r.kind != ActionKind::recompute || is_chain_temporary(r, life)) continue;
    const TensorId x = r.tensor;
    const StepIndex t = r.ready_before_step;
    const Lifetime& l = life[size_t(x)];
    if (std::binary_search(l.uses.begin(), l.uses.end(), t)) continue;
    // x's next discard at or after t, with no other action of x before it.
    size_t discard = actions.size();
    bool clear = true;
    for (size_t j = 0; j < actions.size(); ++j) {
      const Action& d = actions[j];
      if (j == i || d.tensor != x || d.kind == ActionKind::advise) continue;
      if (d.kind == ActionKind::discard && d.after_step >= t) {
        if (discard == actions.size() || d.after_step < actions[discard].after_step) discard = j;
      }
    }
    if (discard == actions.size()) continue;
    const StepIndex last = actions[discard].after_step;  // x off from last + 1
    for (size_t j = 0; j < actions.size() && clear; ++j) {
      const Action& b = actions[j];
      if (j == i || j == discard) continue;
      if (b.tensor == x && b.kind != ActionKind::advise) {  // another action of x in between
        const bool off = b.kind == ActionKind::evict || b.kind == ActionKind::discard;
        const StepIndex at = b.kind == ActionKind::discard || b.kind == ActionKind::prefetch
                                 ? b.after_step + 1 : b.ready_before_step;  // where it acts
        if (off ? (at > t && at <= last) : (at >= t && at <= last + 1)) clear = false;
      }
      if (reads(b, x) && b.ready_before_step >= t && b.ready_before_step <= last + 1) clear = false;
    }
    for (StepIndex u : l.uses) clear &= !(u >= t && u <= last);
    if (!clear) continue;
    const size_t hi = std::max(i, discard), lo = std::min(i, discard);
    actions.erase(actions.begin() + std::ptrdiff_t(hi));
    actions.erase(actions.begin() + std::ptrdiff_t(lo));
    prune_temporaries(g, life, {t}, actions);
    ++dropped;
    i = size_t(-1);  // again from the start: the indices moved
  }
  return dropped;
}

}  // namespace autovm
