// The pieces of the lower bound (bound_parts.h).
#include "plan/bound_parts.h"

namespace autovm::bound_parts {

std::vector<OffAble> off_able_at(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                 StepIndex s, const std::vector<double>& compute_us,
                                 const RecomputePieces& regeneration, MovableKinds movable) {
  std::vector<OffAble> items;
  std::vector<const std::vector<StepIndex>*> chains;  // null: not regenerable
  std::vector<int> users(size_t(g.step_count()), 0);  // off-able tensors whose chain holds a step
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[size_t(t.id)];
    // Off-able: live, movable, unused at s and covered by a gap there (gaps.h), so that the
    // off-able bytes are live(s) - unavoidable(s).
    if (t.bytes == 0 || !movable.has(t.kind) || !live_at(l, s) || l.uses.empty() || used_at(l, s))
      continue;
    if (!l.persistent && l.uses.front() > s) continue;  // before its first use: unavoidable
    OffAble item;
    item.bytes = t.bytes;
    auto next = std::upper_bound(l.uses.begin(), l.uses.end(), s);
    item.release = next == l.uses.begin() ? -1 : *std::prev(next);
    item.deadline = next == l.uses.end() ? g.step_count() : *next;
    const std::vector<StepIndex>* chain = regeneration.chain_at(t.id, s);
    if (chain) {
      item.cost = 0;
      item.may_overlap = regeneration.may_overlap(t.id, s);
      for (StepIndex q : *chain) users[size_t(q)]++;
    }
    items.push_back(item);
    chains.push_back(chain);
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (chains[i])
      for (StepIndex q : *chains[i]) items[i].cost += compute_us[size_t(q)] / users[size_t(q)];
  return items;
}

// The forced stall before each step b (docs/lower-bound.md): max(F(b), D(b)), F(b) the to-device time of
// the tensors that can only arrive at b by a prefetch issued when step b-1 finishes, D(b) the
// to-host time of those that can only leave at b by an eviction issued then.
std::vector<double> forced_stall_us(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<int64_t>& unavoidable, int64_t budget,
                                    const Mechanism& mech, const RecomputePieces& regeneration,
                                    MovableKinds movable) {
  const StepIndex n = g.step_count();
  std::vector<double> forced(size_t(n), 0);
  std::vector<TensorId> used;
  auto uses_of = [&](const Step& step) {
    used.assign(step.inputs.begin(), step.inputs.end());
    used.insert(used.end(), step.outputs.begin(), step.outputs.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
  };
  for (StepIndex b = 1; b < n; ++b) {
    uses_of(g.step(b));
    int64_t arriving = 0;  // bytes that cannot be regenerated at b and may be off at b-1
    double f = 0;
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      const Lifetime& l = life[size_t(x)];
      // Not resident at b-1 only if off there: x is live at b-1, unused there, and a gap
      // covers b-1 (a non-persistent tensor before its first use is in unavoidable(b-1)).
      if (bytes == 0 || used_at(l, b - 1) || !(l.persistent || l.first < b)) continue;
      if (!movable.has(g.tensor(x).kind)) continue;  // resident throughout: never arrives
      if (!l.persistent && l.uses.front() >= b) continue;
      if (regeneration.chain_at(x, b - 1)) continue;  // a recompute can make it before b
      arriving += bytes;
      if (unavoidable[size_t(b - 1)] + bytes <= budget) continue;  // may be resident at b-1
      f += mech.to_device.time_us(bytes);
    }
    // Together: at most the room at b-1 of them is resident there; the rest arrives.
    int64_t room = std::max<int64_t>(0, budget - unavoidable[size_t(b - 1)]);
    if (arriving > room)
      f = std::max(f, double(arriving - room) / (mech.to_device.bandwidth_gbps * 1e3));
    // Forced departures: x used at b-1, live at b and unused there, that no recompute can make
    // again before its next use, with unavoidable(b) + bytes(x) > budget.
    uses_of(g.step(b - 1));
    int64_t leaving = 0;  // bytes that cannot be regenerated and cannot all stay at b
    double d = 0;
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      const Lifetime& l = life[size_t(x)];
      if (bytes == 0 || !movable.has(g.tensor(x).kind) || used_at(l, b) || !live_at(l, b)) continue;
      if (regeneration.chain_at(x, b)) continue;  // may be discarded at b and regenerated
      leaving += bytes;
      if (unavoidable[size_t(b)] + bytes <= budget) continue;  // may stay resident at b
      d += mech.to_host.time_us(bytes);
    }
    // Together: at most the room at b of them stays resident; the rest leaves.
    room = std::max<int64_t>(0, budget - unavoidable[size_t(b)]);
    if (leaving > room)
      d = std::max(d, double(leaving - room) / (mech.to_host.bandwidth_gbps * 1e3));
    forced[size_t(b)] = std::max(f, d);
  }
  return forced;
}

// The forced windows of every gap (docs/lower-bound.md): x cannot be resident at a step s of the gap
// (unavoidable(s) + bytes(x) > budget) and no recompute can make it again from s; its eviction
// runs in (use before the gap, first such s], its prefetch in (last such s, use after the gap].
std::vector<Window> forced_windows(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                   const std::vector<int64_t>& unavoidable, int64_t budget,
                                   const Mechanism& mech, const RecomputePieces& regeneration,
                                   MovableKinds movable) {
  const StepIndex n = g.step_count();
  std::vector<Window> windows;
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[size_t(t.id)];
    if (t.bytes == 0 || l.uses.empty() || !movable.has(t.kind)) continue;
    auto forced_off = [&](StepIndex s) {
      return unavoidable[size_t(s)] + t.bytes > budget && !regeneration.chain_at(t.id, s);
    };
    double out_us = mech.to_host.time_us(t.bytes), in_us = mech.to_device.time_us(t.bytes);
    // Steps (from, to) of a gap; `leaves`: used at `from`; `returns`: used at `to`.
    auto gap = [&](StepIndex from, StepIndex to, bool leaves, bool returns) {
      StepIndex first = -1, last = -1;
      for (StepIndex s = from + 1; s < to; ++s)
        if (forced_off(s)) {
          if (first < 0) first = s;
          last = s;
        }
      if (first < 0) return;
      if (leaves) windows.push_back({from, first, out_us, false, t.id});
      if (returns) windows.push_back({last, to, in_us, true, t.id});
    };
    for (size_t k = 1; k < l.uses.size(); ++k) gap(l.uses[k - 1], l.uses[k], true, true);
    if (l.persistent) {  // the wrap-around gap, within this training step
      gap(l.uses.back(), n, true, false);
      gap(-1, l.uses.front(), false, true);
    }
  }
  return windows;
}

}  // namespace autovm::bound_parts
